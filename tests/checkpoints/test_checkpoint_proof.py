"""What a resume reads is proven before it is used, and every JSON file is read by the one reader.

A universal checkpoint converted into checkpoint-N/universal belongs to that checkpoint alone; every
architecture setting a checkpoint records is compared on resume; JSON nested 200,000 deep is one line
naming the file in every reader (and `--resume auto` passes over such a checkpoint); a FIFO where an
input file belongs is called a pipe. All in-process, no training.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import types
from pathlib import Path

import pytest
from helpers import FINGERPRINT, FakeAccelerator, FakeScheduler, checkpointer

from solution.checkpoints.checkpointer import Checkpointer
from solution.checkpoints.layout import DS_TAG, verify_manifest, write_manifest
from solution.checkpoints.resume import UNIVERSAL_DIR, convert_to_universal
from solution.checkpoints.state import find_checkpoint

DEEP = "[" * 200_000 + "]" * 200_000  # deeper than Python's recursion limit lets json.loads follow


# -- the universal checkpoint belongs to its checkpoint ---------------------------------------------------
@pytest.fixture
def fake_ds_to_universal(monkeypatch):
    """DeepSpeed's ds_to_universal stood in for: it writes, under the output folder, the bytes of the input
    folder's model states (so a universal folder shows which checkpoint it came from). Returns the calls."""
    calls = []

    def main(args):
        calls.append(args.input_folder)
        out = Path(args.output_folder) / "zero" / "bert.weight"
        out.mkdir(parents=True)
        (out / "fp32.pt").write_bytes((Path(args.input_folder) / "mp_rank_00_model_states.pt").read_bytes())
        (Path(args.output_folder).parent / "latest_universal").write_text(DS_TAG)

    checkpoint_pkg = types.ModuleType("deepspeed.checkpoint")
    checkpoint_pkg.ds_to_universal = types.SimpleNamespace(main=main)
    monkeypatch.setitem(sys.modules, "deepspeed", types.ModuleType("deepspeed"))
    monkeypatch.setitem(sys.modules, "deepspeed.checkpoint", checkpoint_pkg)
    return calls


def zero_checkpoint(path: Path, weights: bytes) -> Path:
    (path / DS_TAG).mkdir(parents=True)
    (path / DS_TAG / "mp_rank_00_model_states.pt").write_bytes(weights)
    (path / "trainer_state.json").write_text("{}")
    write_manifest(path)
    return path


def universal_weights(ckpt: Path) -> bytes:
    return (ckpt / UNIVERSAL_DIR / DS_TAG / "zero" / "bert.weight" / "fp32.pt").read_bytes()


def test_a_universal_folder_of_another_checkpoint_is_converted_again_saying_why(tmp_path, fake_ds_to_universal):
    a, b = zero_checkpoint(tmp_path / "a" / "checkpoint-4", b"A"), zero_checkpoint(tmp_path / "b" / "checkpoint-4", b"B")
    said = []
    convert_to_universal(a, log=said.append)
    assert universal_weights(a) == b"A" and len(fake_ds_to_universal) == 1
    assert said == [f"converting {a / DS_TAG} to a universal checkpoint in {a / UNIVERSAL_DIR}"]
    convert_to_universal(a, log=said.append)  # its own, proven by its manifest: reused
    assert len(fake_ds_to_universal) == 1 and len(said) == 1
    assert verify_manifest(a)  # the checkpoint's own manifest still holds beside it

    shutil.copytree(a / UNIVERSAL_DIR, b / UNIVERSAL_DIR)  # a stale copy: checkpoint a's state
    said.clear()
    convert_to_universal(b, log=said.append)
    assert universal_weights(b) == b"B" and len(fake_ds_to_universal) == 2
    [line] = said
    assert line.startswith(f"{b / UNIVERSAL_DIR}: converted from another checkpoint (its manifest.json names "), line
    assert line.endswith(f"; converting {b / DS_TAG} again"), line
    assert sorted(p.name for p in b.iterdir()) == ["manifest.json", DS_TAG, "trainer_state.json", UNIVERSAL_DIR]


@pytest.mark.parametrize("damage,named", [
    (lambda u: (u / DS_TAG / "zero" / "bert.weight" / "fp32.pt").write_bytes(b"X"), "sha256 differs"),
    (lambda u: (u / DS_TAG / "zero" / "extra.pt").write_bytes(b"X"), "not in manifest.json"),
    (lambda u: (u / "manifest.json").unlink(), "no manifest.json"),
    (lambda u: (u / "manifest.json").write_text(DEEP), "nested deeper"),
])
def test_a_changed_or_unproven_universal_folder_is_converted_again(tmp_path, fake_ds_to_universal, damage, named):
    ckpt = zero_checkpoint(tmp_path / "checkpoint-2", b"A")
    convert_to_universal(ckpt, log=lambda m: None)
    damage(ckpt / UNIVERSAL_DIR)
    said = []
    convert_to_universal(ckpt, log=said.append)
    [line] = said
    assert named in line and line.endswith("again") and "\n" not in line, line
    assert universal_weights(ckpt) == b"A" and len(fake_ds_to_universal) == 2
    convert_to_universal(ckpt, log=said.append)
    assert len(fake_ds_to_universal) == 2  # the new one holds


@pytest.mark.slow
def test_deepspeeds_own_universal_checkpoint_is_proven_and_reused(zero2_checkpoint, tmp_path):
    """The real ds_to_universal output: its manifest verifies on the next resume (no second conversion), and
    it is converted again in a checkpoint it was copied into."""
    a, b = tmp_path / "a" / "checkpoint-1", tmp_path / "b" / "checkpoint-1"
    for ckpt in (a, b):
        shutil.copytree(zero2_checkpoint, ckpt)
    state = json.loads((b / "trainer_state.json").read_text())
    (b / "trainer_state.json").write_text(json.dumps({**state, "saved_at": state["saved_at"] + 1}))
    write_manifest(b)  # another save of the same step: another checkpoint
    said = []
    convert_to_universal(a, log=said.append)
    convert_to_universal(a, log=said.append)
    assert said == [f"converting {a / DS_TAG} to a universal checkpoint in {a / UNIVERSAL_DIR}"]
    assert verify_manifest(a)
    shutil.copytree(a / UNIVERSAL_DIR, b / UNIVERSAL_DIR)
    convert_to_universal(b, log=said.append)
    assert said[1].startswith(f"{b / UNIVERSAL_DIR}: converted from another checkpoint"), said
    convert_to_universal(b, log=said.append)
    assert len(said) == 2


# -- every architecture setting is compared ------------------------------------------------------------
@pytest.mark.parametrize("key,value", [("is_decoder", True), ("add_cross_attention", True), ("pad_token_id", 3)])
def test_settings_that_change_the_forward_are_architecture(key, value):
    from transformers import BertConfig

    from solution.model.qa_model import architecture

    plain, changed = architecture(BertConfig()), architecture(BertConfig(**{key: value}))
    assert key in plain and plain[key] != changed[key]
    json.dumps(plain)  # recorded in trainer_state.json as it is


def test_a_resume_that_makes_a_bidirectional_checkpoint_causal_is_refused_naming_it(tmp_path, monkeypatch):
    from transformers import BertConfig

    from solution.model.qa_model import architecture

    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    written = {**FINGERPRINT, "architecture": architecture(BertConfig())}
    path = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), written, save_due=lambda s, e: True,
                        log=lambda m: None).save(2, 0, 2)
    with pytest.raises(ValueError) as e:
        checkpointer(tmp_path).load(path, {"architecture": architecture(BertConfig(is_decoder=True))}, 4)
    assert str(e.value).startswith(f"{path}: field 'architecture.is_decoder' is False in the checkpoint but True in "
                                   "this run; it must match"), str(e.value)


def test_a_checkpoint_recording_fewer_architecture_keys_is_compared_through_its_model_meta(tmp_path, monkeypatch):
    """Written before is_decoder joined the architecture keys: its model_meta/config.json (the backbone's whole
    config) still records it, so it is compared, not warned about as unrecorded."""
    from transformers import BertConfig

    from solution.model.qa_model import architecture

    monkeypatch.setattr("solution.checkpoints.checkpointer.verify_checkpoint_files", lambda path: 0)
    older = {k: v for k, v in architecture(BertConfig()).items() if k not in ("is_decoder", "pad_token_id")}
    path = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), {**FINGERPRINT, "architecture": older},
                        save_due=lambda s, e: True, log=lambda m: None,
                        write_meta=lambda tmp: BertConfig().save_pretrained(tmp / "model_meta")).save(2, 0, 2)
    said = []
    ck = Checkpointer(FakeAccelerator(), tmp_path, FakeScheduler(), FINGERPRINT, save_due=lambda s, e: False,
                      log=said.append)
    assert ck.load(path, {"architecture": architecture(BertConfig())}, 4) == (2, 0, 2)
    assert not [m for m in said if m.startswith("WARNING")], said
    with pytest.raises(ValueError, match="field 'architecture.is_decoder' is False in the checkpoint but True"):
        ck.load(path, {"architecture": architecture(BertConfig(is_decoder=True))}, 4)


# -- JSON nested 200,000 deep: one line naming the file, in every reader ------------------------------------
def _manifest(tmp_path):
    ckpt = tmp_path / "checkpoint-1"
    ckpt.mkdir()
    (ckpt / "manifest.json").write_text(DEEP)
    return ckpt / "manifest.json", lambda: verify_manifest(ckpt)


def _trainer_state(tmp_path):
    from solution.checkpoints.state import TrainerState

    (tmp_path / "trainer_state.json").write_text(DEEP)
    return tmp_path / "trainer_state.json", lambda: TrainerState.read(tmp_path)


def _settings(tmp_path):
    from solution.common.settings import read_settings_file

    (tmp_path / "ds.json").write_text(DEEP)
    return tmp_path / "ds.json", lambda: read_settings_file(str(tmp_path / "ds.json"), "DeepSpeed config")


def _qa_config(tmp_path):
    from solution.model.qa_config import read_qa_config

    (tmp_path / "qa_config.json").write_text(DEEP)
    return tmp_path / "qa_config.json", lambda: read_qa_config(tmp_path / "qa_config.json")


def _kernel_budget(tmp_path):
    from solution.experiments.kernel_budget import read_packed

    (tmp_path / "config.json").write_text(DEEP)
    return tmp_path / "config.json", lambda: read_packed(tmp_path)


def _hard_negative_scores(tmp_path):
    from solution.windows.sampling import HardNegativeWeights

    (tmp_path / "scores.jsonl").write_text(DEEP + "\n")
    return tmp_path / "scores.jsonl", lambda: HardNegativeWeights(str(tmp_path / "scores.jsonl"), 0.5)


def _hard_negatives_resume(tmp_path):
    from solution.hard_negatives import resume_point

    header = {"format": "nq-hard-negative-scores", "docs_per_chunk": 1}
    (tmp_path / "out.jsonl").write_text(json.dumps(header) + "\n" + DEEP + "\n")
    return tmp_path / "out.jsonl", lambda: resume_point(str(tmp_path / "out.jsonl"), header)


def _synth_more_ids(tmp_path):
    from solution.synth_more import _ids

    (tmp_path / "train.jsonl").write_text(DEEP + "\n")
    return tmp_path / "train.jsonl", lambda: _ids(tmp_path / "train.jsonl")


def _nq_line(tmp_path):
    from solution.data.nq import parse_example

    return tmp_path / "train.jsonl", lambda: parse_example(DEEP, str(tmp_path / "train.jsonl"), 3)


@pytest.mark.parametrize("reader", [_manifest, _trainer_state, _settings, _qa_config, _kernel_budget,
                                    _hard_negative_scores, _hard_negatives_resume, _synth_more_ids, _nq_line])
def test_json_nested_200000_deep_is_one_line_naming_the_file(tmp_path, reader):
    path, read = reader(tmp_path)
    with pytest.raises(ValueError) as e:
        read()
    message = str(e.value)
    assert str(path) in message and "nested" in message and "\n" not in message, message


def test_a_heartbeat_nested_200000_deep_reads_as_no_beat(tmp_path):
    from solution.distributed.watchdog import Beat

    (tmp_path / "rank-1.json").write_text(DEEP)
    assert Beat.read(tmp_path / "rank-1.json", 1).beat == -1  # as an unreadable file: the watchdog goes on


@pytest.mark.parametrize("name", ["manifest.json", "trainer_state.json"])
def test_resume_auto_passes_over_a_checkpoint_whose_json_will_not_parse(tmp_path, name):
    ck = checkpointer(tmp_path, every=2)
    for step in (2, 4):
        ck.save(step, 0, step)
    (tmp_path / "checkpoint-4" / name).write_text(DEEP)
    said = []
    assert find_checkpoint(tmp_path, "auto", log=said.append) == tmp_path / "checkpoint-2"
    [line] = said
    assert line.startswith(f"resume auto: skipped {tmp_path / 'checkpoint-4'} ({tmp_path / 'checkpoint-4' / name}: "), line
    assert "nested deeper" in line and "\n" not in line, line


# -- a FIFO where an input file belongs ------------------------------------------------------------------
@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "train.jsonl"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("like", [[], ["--like", "mlebench"]])
def test_split_calls_a_fifo_input_a_pipe(fifo, tmp_path, capsys, like):
    from solution.split import main

    with pytest.raises(SystemExit) as e:
        main(["--input", str(fifo), "--out", str(tmp_path / "out"), *like])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith(f"error: --input {fifo}: a pipe (FIFO), not a regular file"), err
    assert "\n" not in err


def test_hard_negatives_calls_a_fifo_train_file_a_pipe(fifo, tmp_path, capsys):
    from solution.hard_negatives import main

    assert main(["--model", str(tmp_path / "model"), "--train_file", str(fifo), "--out", str(tmp_path / "s.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --train_file {fifo}: a pipe (FIFO), not a regular file"), err
    assert "\n" not in err
