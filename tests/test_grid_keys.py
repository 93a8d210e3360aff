"""The grid's run keys (key format 3): a run is keyed by its resolved config, not its command line; a unit file
named by a run's key whose config is another run's is left out; a plan written under the earlier format (its
manifest names no key format) is still read by its command-line keys."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

from scale.experiments.catalog import plan
from scale.grid import unit_files

RUN = plan("synthetic", "resnet18", True, ("E3E4",), seeds=1, epochs=1)[0]


def _unit(out, pid: str, run, config: dict, key: str, **extra) -> None:
    rec = {"plan": pid, "name": run.name, "device": "cpu", "threads": 1, "key_hash": key, "status": "finished",
           "experiment": run.experiment, "seed": run.seed, "labels": run.labels, "argv": run.argv, "config": config,
           **extra}
    (out / "units").mkdir(parents=True, exist_ok=True)
    (out / "units" / f"{pid}--{run.name}--cpu-t1--{key}.json").write_text(json.dumps(rec))


def test_the_key_is_the_resolved_config_not_where_it_ran():
    key = unit_files.config_key(RUN)
    assert unit_files.config_key(replace(RUN, data_dir="/elsewhere")) == key  # where the data is: in no key
    assert unit_files.config_key(replace(RUN, settings=dict(RUN.settings, lr=RUN.settings.get("lr", 1e-3) * 2))) != key
    assert unit_files.config_key(replace(RUN, probe_images=7)) != key
    # a default written out as a setting is the same run, though its command line is not the same
    assert "log_every" not in RUN.settings
    same = replace(RUN, settings=dict(RUN.settings, log_every=RUN.config("cpu").log_every))
    assert same.argv != RUN.argv and unit_files.config_key(same) == key
    assert unit_files.run_key(same.argv, same.paper, False) != unit_files.run_key(RUN.argv, RUN.paper, False)


def test_a_unit_file_whose_config_is_not_its_keys_is_left_out(tmp_path):
    pid = unit_files.plan_id("synthetic", "resnet18", True, 1)
    grid = unit_files.of_run(RUN)
    planned = unit_files.planned_config(RUN)
    _unit(tmp_path, pid, RUN, dict(planned, device="cuda", threads=8), grid.key)  # where it ran differs: its own
    found, left = unit_files.find(tmp_path, pid, [grid])
    assert list(found) == [RUN.name] and not left
    (tmp_path / "units" / f"{pid}--{RUN.name}--cpu-t1--{grid.key}.json").unlink()
    _unit(tmp_path, pid, RUN, dict(planned, lr=planned["lr"] * 10), grid.key)  # another run's content, this name
    found, left = unit_files.find(tmp_path, pid, [grid])
    assert not found and len(left) == 1 and "its config is not its key's (lr" in left[0]


def test_a_plan_of_the_earlier_key_format_is_read_by_its_command_lines(tmp_path):
    pid = "grid-000000000000"
    record = json.loads(json.dumps({**asdict(RUN), "argv": RUN.argv}))  # as a manifest holds it
    old = unit_files.of_record(record)  # a manifest without "key_format"
    assert old.key == unit_files.run_key(RUN.argv, RUN.paper, RUN.track_hessian) != unit_files.config_key(RUN)
    _unit(tmp_path, pid, RUN, unit_files.planned_config(RUN), old.key)
    found, left = unit_files.find(tmp_path, pid, [old])
    assert list(found) == [RUN.name] and not left
    # the same record, format 3
    assert unit_files.of_record(record, unit_files.KEY_FORMAT).key == unit_files.config_key(RUN)
