"""Slurm hostlist expansion, the same as `scontrol show hostnames` (Slurm 22.05), or a one-line refusal."""

import itertools
import math
import re

from trainer.errors import UserError

MAX_RANGE = 65536  # Slurm refuses a bracket range of more hosts ("Too many hosts in range")
MAX_HOSTS = 1 << 20  # the product of several ranges, bounded before anything is built

# Inside brackets, as Slurm reads a range (strtoul): whitespace may lead either bound and follow the lower one
# before its `-`, and counts in the lower bound's width (`n[ 1-2]` -> n01 n02); none may end the range.
_LOW = re.compile(r"[ \t\n\r\f\v]*[0-9]+[ \t\n\r\f\v]*", re.ASCII)
_NUMBER = re.compile(r"[ \t\n\r\f\v]*[0-9]+", re.ASCII)


def _items(hostlist: str) -> list[str]:
    """The hostlist's items: separated by commas or whitespace outside brackets, as Slurm's parser does."""
    items, current, depth = [], [], 0
    for ch in hostlist:
        depth += (ch == "[") - (ch == "]")
        if depth <= 0 and (ch == "," or ch in " \t\n\r\f\v"):
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    return [item for item in [*items, "".join(current)] if item]


def _refuse(hostlist: str, why: str) -> UserError:
    return UserError(f"invalid hostlist {hostlist!r}: {why}; pass a Slurm hostlist such as node[01-04,07]")


def _expand_range(body: str, whole: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        lo_text, dash, hi_text = item.partition("-")
        if not (_LOW if dash else _NUMBER).fullmatch(lo_text) or (dash and not _NUMBER.fullmatch(hi_text)):
            raise _refuse(whole, f"bad range {item!r} (ASCII digits, lo-hi, no space at its end)")
        lo, hi = int(lo_text), int(hi_text if dash else lo_text)
        if hi < lo:
            raise _refuse(whole, f"range {item!r} runs backwards")
        if hi - lo + 1 > MAX_RANGE:
            raise _refuse(whole, f"range {item!r} holds more than {MAX_RANGE} hosts")
        # The width of the lower bound fixes the zero padding: n[08-11] -> n08..n11.
        out.extend(str(n).zfill(len(lo_text)) for n in range(lo, hi + 1))
    return out


def _expand_one(pattern: str, whole: str) -> list[str]:
    """One item: literal text and bracket groups, with nothing after the last group (Slurm refuses it)."""
    parts = re.split(r"\[([^\[\]]*)\]", pattern)  # text, group, text, group, ..., text
    texts, bodies = parts[0::2], parts[1::2]
    if any(ch in text for text in texts for ch in "[]"):
        raise _refuse(whole, "unbalanced brackets")
    if bodies and texts[-1]:
        raise _refuse(whole, f"text {texts[-1]!r} after the last bracket")
    if not bodies:
        return [pattern]
    groups = [_expand_range(body, whole) for body in bodies]
    if math.prod(len(g) for g in groups) > MAX_HOSTS:
        raise _refuse(whole, f"it names more than {MAX_HOSTS} hosts")
    # scontrol's order: the last group varies fastest, then the first, the second, ... and the one before
    # the last slowest (a[1-2]b[1-2]c[1-2] -> a1b1c1 a1b1c2 a2b1c1 a2b1c2 a1b2c1 ...).
    order = [*reversed(range(len(groups) - 1)), len(groups) - 1]
    hosts = []
    for combo in itertools.product(*(groups[i] for i in order)):
        values = dict(zip(order, combo, strict=True))
        hosts.append("".join(text + values.get(i, "") for i, text in enumerate(texts)))
    return hosts


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a Slurm hostlist such as `node[01-03,07],gpu5` into host names, in scontrol's order."""
    hosts: list[str] = []
    for pattern in _items(hostlist):
        hosts.extend(_expand_one(pattern, hostlist))
        if len(hosts) > MAX_HOSTS:
            raise _refuse(hostlist, f"it names more than {MAX_HOSTS} hosts")
    return hosts
