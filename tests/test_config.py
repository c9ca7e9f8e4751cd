import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.messages import Golden, case_id, raises
from tests.support import ROOT
from trainer.config import TrainConfig, build_config, from_dict, parse_overrides, valid_keys
from trainer.errors import UserError


def test_overrides_take_types_from_the_fields() -> None:
    config = build_config(["steps=7", "optim.lr=0.5", "data.verify_images=false", "amp=bf16", "data.root=/d"])
    assert (config.steps, config.optim.lr, config.data.verify_images, config.amp, config.data.root) == (
        7,
        0.5,
        False,
        "bf16",
        "/d",
    )


def test_overrides_win_over_the_profile_section() -> None:
    config = build_config(["log.every=3"], base={"steps": 9, "log": {"every": 1, "image_every": 0}})
    assert (config.steps, config.log.every, config.log.image_every) == (9, 3, 0)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["stepz=1"], "stepz"),
        (["data.nope=1"], "data.nope"),
        (["steps=ten"], "steps"),
        (["optim.lr=fast"], "optim.lr"),
        (["data.verify_images=maybe"], "data.verify_images"),
        (["steps"], "steps"),
        (["amp=fp8"], "amp"),
        (["task=segment"], "segment"),
        (["steps=0"], "steps"),
        (["data.image_size=30"], "data.image_size"),
        (["data.prefetch_factor=0"], "data.prefetch_factor"),
        (["dist.bucket_cap_mb=0"], "dist.bucket_cap_mb"),
        (["dist.static_graph=sometimes"], "dist.static_graph"),
        (["optim.lr=inf"], "optim.lr"),
        (["optim.lr=1e400"], "optim.lr"),
        (["optim.lr=nan"], "optim.lr"),
        (["dist.bucket_cap_mb=inf"], "dist.bucket_cap_mb"),
        (["seed=99999999999999999999999"], "seed"),
        (["seed=-1"], "seed"),
        (["dist.timeout_s=99999999999999999999"], "dist.timeout_s"),
        (["dist.timeout_s=9999999999"], "dist.timeout_s"),
    ],
    ids=case_id,
)
def test_bad_overrides_say_what_and_how(golden: Golden, overrides: list[str], named: str) -> None:
    with raises(golden, named):
        build_config(overrides)


@pytest.mark.parametrize(
    ("data", "named"),
    [
        ({"steps": "10"}, "steps"),
        ({"steps": True}, "steps"),
        ({"log": {"every": 1.5}}, "log.every"),
        ({"log": 3}, "log"),
        ({"bogus": 1}, "bogus"),
    ],
    ids=["steps-str", "steps-bool", "log.every-float", "log-int", "bogus"],
)
def test_wrong_types_name_the_key(golden: Golden, data: dict, named: str) -> None:
    with raises(golden, named):
        from_dict(TrainConfig, data)


def test_ints_are_accepted_for_floats() -> None:
    assert from_dict(TrainConfig, {"optim": {"lr": 1}}).optim.lr == 1.0


def test_parse_overrides_nests_dotted_keys() -> None:
    assert parse_overrides(["log.every=2", "seed=3"]) == {"log": {"every": 2}, "seed": 3}


def test_the_callers_visible_gpus_reach_the_local_executor(tmp_path: Path) -> None:
    from jobs.plan import make_plan, visible_gpus
    from jobs.profiles import profile_of

    profile = profile_of({"name": "p", "executor": "local", "gpus_per_node": 2})
    plan = make_plan(profile, [], tmp_path, has_gpus=True, python="python", gpus=visible_gpus("2,3"))
    assert plan.parameters["visible_gpus"] == (2, 3) and plan.parameters["gpus_per_node"] == 2
    assert visible_gpus(None) == () and visible_gpus("") == ()
    with pytest.raises(UserError, match="takes GPU indices"):
        visible_gpus("GPU-5d2e")


def help_settings(*args: str) -> str:
    """`python -m trainer [args] --help-settings`, as a user runs it: exit 0, the table on stdout."""
    cmd = [sys.executable, "-m", "trainer", *args, "--help-settings"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return result.stdout


def table_rows(table: str) -> dict[str, list[str]]:
    """A Markdown settings table's rows by key: its cells (default, description), pipes escaped as \\|."""
    lines = table.strip().splitlines()
    assert lines[:2] == ["| key | default | description |", "|---|---|---|"]
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines[2:]]
    return {key.strip("`"): rest for key, *rest in cells}


def readme_table(marker: str) -> str:
    """The table jobs/reference/settings.md holds between `<!-- {marker} -->` and `<!-- end {marker} -->`."""
    text = (ROOT / "jobs" / "reference" / "settings.md").read_text()
    found = re.search(rf"<!-- {re.escape(marker)} -->\n(.*?)<!-- end {re.escape(marker)} -->", text, re.DOTALL)
    assert found, f"jobs/reference/settings.md lacks the <!-- {marker} --> block"
    return found.group(1).strip("\n") + "\n"


def test_help_settings_describes_every_key_and_is_the_table_in_the_settings_reference() -> None:
    table = help_settings()
    rows = table_rows(table)
    assert list(rows) == valid_keys()
    assert all(description for _, description in rows.values()), [k for k, (_, d) in rows.items() if not d]
    assert rows["steps"][0] == "`300`" and rows["data.pin_memory"][0] == "`true`"
    # The task's own settings come from its settings dataclass: classify's when task=classify is given.
    classify = table_rows(help_settings("task=classify"))
    assert list(classify) == valid_keys(task="classify") and all(d for _, d in classify.values())
    # The doc is the command's output, verbatim: regenerate it when a setting changes.
    assert readme_table("settings") == table
    own = [line for line in help_settings("task=classify").splitlines() if line.startswith("| `classify.")]
    assert readme_table("classify settings") == "\n".join([*table.splitlines()[:2], *own]) + "\n"
    # Torch-free, as the submitter is: the table comes from the dataclasses alone.
    code = "import sys, trainer.__main__ as m\nm.main(['--help-settings'])\nassert 'torch' not in sys.modules\n"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60).returncode == 0


SUGGESTION = re.compile(r"e\.g\. ([A-Za-z_][\w.]*)(?:=|: )(\S+?)[;,)]?$")
BAD_NUMBERS = ["nan", "inf", "-1", "0", "1e30", "99999999999999999999", "x"]


def suggested(message: str) -> tuple[str, str] | None:
    """The `key=value` (or `key: value`) a refusal suggests at its end, if it suggests one."""
    found = SUGGESTION.search(message)
    return (found.group(1), found.group(2)) if found else None


def test_every_value_a_config_refusal_suggests_is_accepted() -> None:
    """Each bad number for each trainer key: where the refusal says `e.g. key=value`, that value is valid."""
    checked = 0
    for key in valid_keys():
        for bad in BAD_NUMBERS:
            try:
                build_config([f"{key}={bad}"])
            except UserError as exc:
                if (advice := suggested(str(exc))) is not None and advice[0] == key:
                    build_config([f"{key}={advice[1]}"])  # raises if the advice is itself refused
                    checked += 1
    assert checked > 50


def test_every_value_a_profile_refusal_suggests_is_accepted() -> None:
    """The same for each number of a profile (script_hang_s=nan once suggested 0.001, which is refused)."""
    import yaml

    from jobs.profiles import KEYS, profile_of

    checked = 0
    for key in KEYS:
        for bad in BAD_NUMBERS:
            data = {"name": "p", "executor": "slurm", key: yaml.safe_load(bad)}
            try:
                profile_of(data)
            except UserError as exc:
                if (advice := suggested(str(exc))) is not None and advice[0] == key:
                    profile_of(data | {key: yaml.safe_load(advice[1])})
                    checked += 1
    assert checked > 10


@pytest.mark.parametrize("path", sorted((ROOT / "cluster_profiles").glob("*.yaml")), ids=lambda p: p.stem)
def test_a_shipped_profiles_flat_keys_fill_its_sections_and_read_back_from_its_record(path: Path) -> None:
    """Each flat YAML key lands in its section, and the flat record job.json keeps (as before the sections)
    builds the same profile: a run made before reads as it did."""
    import yaml

    from jobs.profiles import KEYS, load_profile, profile_of

    profile, written = load_profile(str(path)), yaml.safe_load(path.read_text())
    for key, value in written.items():
        assert getattr(getattr(profile, KEYS[key]) if KEYS[key] else profile, key) == value
    record = profile.flat()
    assert set(record) == set(KEYS) and profile_of(record).flat() == record
    minutes = profile.with_overrides(timeout_min=90).resources.timeout_min
    assert profile_of(record | {"timeout_min": 90}).resources.timeout_min == 90 == minutes
