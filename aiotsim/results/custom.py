"""The record of a run whose model or data came from Python, not from its scenario.

``aiotsim.run(..., model=..., dataset=...)`` trains the user's ``nn.Module`` on the user's tensors.
Its scenario still names a registry model and data set (validation needs them), but the run used
neither, so its run directory must not claim them:

* ``scenario.toml`` says ``model.name = "custom"`` and/or ``data.dataset = "custom"`` (with a
  comment saying why): :func:`recorded_toml`;
* ``custom.json`` records what ran: the model's class, parameter count, layers and tensors
  (:func:`~aiotsim.learn.models.describe.describe_module`), the data's name, sample counts, input
  shape and classes, and the names the scenario carried in their place (``scenario_names``, so that
  :func:`resume_scenario` can rebuild the scenario the run's checkpoint was written by).

A model or data set given as an object cannot be rebuilt from files (no input file may run code):
:func:`resume_scenario` refuses to resume such a run without them, with a message saying how to
resume it from Python.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tomli_w
from torch import nn

from aiotsim.config import Scenario, load_scenario, read_toml, scenario_from_dict
from aiotsim.errors import ConfigError, ResultsError
from aiotsim.learn.datasets import Dataset
from aiotsim.learn.models.describe import describe_module
from aiotsim.results.store import RunWriter, read_json, write_file

RECORD_NAME = "custom.json"
RECORD_VERSION = 1
CUSTOM = "custom"  # model.name / data.dataset of a run whose model / data came from Python
_NAME_KEYS = ("model.name", "data.dataset")
_HEADER = (
    '# model.name / data.dataset = "custom": this run trained a model / data set given to aiotsim.run()\n'
    "# in Python, described in custom.json. Files cannot rebuild them (no input file may run code):\n"
    "# resume with aiotsim.resume(RUN_DIR, model=..., dataset=...) and the run's own model and data.\n"
)


def custom_record(scenario: Scenario, model: nn.Module | None, data: Dataset | None) -> dict[str, Any] | None:
    """``custom.json``'s content for a run of ``scenario`` with ``model``/``data`` objects (None
    when both are None: the scenario describes the run)."""
    if model is None and data is None:
        return None
    names = scenario.to_dict()
    replaced = {"model.name": model is not None, "data.dataset": data is not None}
    return {
        "schema_version": RECORD_VERSION,
        "model": describe_module(model) if model is not None else None,
        "data": _describe_data(data) if data is not None else None,
        "scenario_names": {k: names[k.split(".")[0]][k.split(".")[1]] for k in _NAME_KEYS if replaced[k]},
    }


def _describe_data(data: Dataset) -> dict[str, Any]:
    return {
        "name": data.name,
        "train_samples": len(data.train_y),
        "test_samples": len(data.test_y),
        "input_shape": list(data.input_shape),
        "classes": data.num_classes,
    }


def recorded_toml(scenario: Scenario, model: nn.Module | None, data: Dataset | None) -> str:
    """The ``scenario.toml`` text of a run: the scenario's own TOML, unless ``model``/``data`` were
    given, whose names then say ``"custom"`` under a comment (see the module docstring)."""
    if model is None and data is None:
        return scenario.to_toml()
    out = scenario.to_dict()
    if model is not None:
        out["model"]["name"] = CUSTOM
    if data is not None:
        out["data"]["dataset"] = CUSTOM
    return _HEADER + tomli_w.dumps(out)


def custom_run_writer(
    out_dir: str | Path, scenario: Scenario, model: nn.Module | None = None, data: Dataset | None = None
) -> RunWriter:
    """A :class:`RunWriter` for a run of ``scenario`` (with ``model``/``data`` objects, if given):
    ``scenario.toml`` from :func:`recorded_toml`, and ``custom.json`` written (a custom run) or
    removed (an earlier custom run's, in a directory a plain run now replaces)."""
    writer = RunWriter(out_dir, recorded_toml(scenario, model, data))
    record = custom_record(scenario, model, data)
    path = writer.dir / RECORD_NAME
    if record is None:
        path.unlink(missing_ok=True)
    else:
        write_file(path, json.dumps(record, indent=2) + "\n")
    return writer


def read_custom_record(run_dir: str | Path) -> dict[str, Any] | None:
    """A run directory's ``custom.json`` (None when it has none: a plain run).

    Raises
    ------
    ResultsError
        When the file is not UTF-8 JSON or not a record (the message names the file).
    """
    path = Path(run_dir) / RECORD_NAME
    if not path.is_file():
        return None
    data = read_json(path)
    problem = _record_problem(data)
    if problem:
        raise ResultsError(f"{path}: not a custom-run record: {problem}")
    return data


def _record_problem(data: Any) -> str | None:
    """Why ``data`` is not a usable ``custom.json`` (None when it is)."""
    if not isinstance(data, dict):
        return f"a JSON object is expected, got {type(data).__name__}"
    if data.get("schema_version") != RECORD_VERSION:
        return f"schema_version {data.get('schema_version')!r}, expected {RECORD_VERSION}"
    if not all(isinstance(data.get(k), (dict, type(None))) for k in ("model", "data")):
        return "model and data must be objects or null"
    names = data.get("scenario_names")
    if (
        not isinstance(names, dict)
        or not set(names) <= set(_NAME_KEYS)
        or not all(isinstance(v, str) for v in names.values())
    ):
        return f"scenario_names must map some of {', '.join(_NAME_KEYS)} to names"
    return None


def _resume_refusal(d: Path, record: dict[str, Any]) -> str:
    """Why a custom run cannot resume from its directory alone, and how to resume it."""
    names = record["scenario_names"]
    m, data = record["model"], record["data"]
    model_name = m.get("class") if m is not None else names.get("model.name", "?")
    data_name = data.get("name") if data is not None else names.get("data.dataset", "?")
    what = " and ".join(
        part
        for part, there in ((f"the model ({m and m.get('params')} parameters)", m), ("the data set", data))
        if there is not None
    )
    return (
        f"{d}: this run trained model {model_name!r} on data set {data_name!r}; {what} came from Python "
        f"(aiotsim.run(); see {RECORD_NAME}) and files cannot rebuild them (no input file may run code), so "
        f"`aiotsim run --resume` cannot continue it: resume it in Python with aiotsim.resume({str(d)!r}, "
        "model=..., dataset=...) and the run's own model and data"
    )


def resume_scenario(run_dir: str | Path, model: nn.Module | None, data: Dataset | None) -> Scenario:
    """The scenario a run in ``run_dir`` was started with, to resume it with ``model``/``data``.

    Raises
    ------
    ConfigError
        When the run trained a model or data set given in Python (``custom.json``) and ``model``/
        ``data`` are not given again: files cannot rebuild them.
    ResultsError
        When ``custom.json`` is damaged.
    """
    d = Path(run_dir)
    record = read_custom_record(d)
    if record is None:
        return load_scenario(d / "scenario.toml")
    given = {"the model": record["model"] is not None, "the data set": record["data"] is not None}
    absent = {"the model": model is None, "the data set": data is None}
    if any(given[k] and absent[k] for k in given):
        raise ConfigError(_resume_refusal(d, record))
    toml = read_toml(d / "scenario.toml")
    for key, name in record["scenario_names"].items():
        section, _, field = key.partition(".")
        table = toml.get(section)
        if isinstance(table, dict):
            table[field] = name  # the name validation needs, which the checkpoint's scenario carries
    return scenario_from_dict(toml, source=str(d / "scenario.toml"))


__all__ = [
    "custom_record",
    "recorded_toml",
    "custom_run_writer",
    "read_custom_record",
    "resume_scenario",
    "RECORD_NAME",
    "CUSTOM",
]
