"""Slurm hostlist expansion, the same as `scontrol show hostnames`."""

import itertools

from trainer.errors import UserError


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        if depth not in (0, 1):
            raise UserError(f"invalid hostlist {text!r}: unbalanced brackets")
    if depth:
        raise UserError(f"invalid hostlist {text!r}: unbalanced brackets")
    parts.append(text[start:])
    return [p for p in parts if p]


def _expand_range(body: str, whole: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise UserError(f"invalid hostlist {whole!r}: bad range {item!r}")
        if not sep:
            out.append(lo)
            continue
        # The width of the lower bound fixes the zero padding: n[08-11] -> n08..n11.
        width = len(lo)
        out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return out


def _expand_one(pattern: str, whole: str) -> list[str]:
    # Alternating literal text and bracket bodies; the product keeps the leftmost
    # bracket outermost, as Slurm does: rack[1-2]-n[01-02] -> rack1-n01, rack1-n02, ...
    pieces: list[list[str]] = []
    rest = pattern
    while "[" in rest:
        head, _, tail = rest.partition("[")
        body, closed, rest = tail.partition("]")
        if not closed:
            raise UserError(f"invalid hostlist {whole!r}: unbalanced brackets")
        pieces.append([head])
        pieces.append(_expand_range(body, whole))
    pieces.append([rest])
    return ["".join(combo) for combo in itertools.product(*pieces)]


def expand_hostlist(hostlist: str) -> list[str]:
    """Expand a Slurm hostlist such as `node[01-03,07],gpu5` into host names."""
    hosts: list[str] = []
    for pattern in _split_top_level(hostlist.strip()):
        hosts.extend(_expand_one(pattern, hostlist))
    return hosts
