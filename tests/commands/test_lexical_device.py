"""`python -m solution.lexical --method sentences --device`: a device this machine lacks is refused at once."""

import subprocess
import sys

import pytest
import torch
from conftest import ROOT, nq_line, write_jsonl


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with CUDA runs --device cuda")
def test_cuda_without_a_gpu_exits_2_with_one_line_before_any_work(tmp_path):
    src = write_jsonl(tmp_path / "dev.jsonl", [nq_line("7")])
    out = tmp_path / "scores.jsonl"
    proc = subprocess.run([sys.executable, "-m", "solution.lexical", "--input", str(src), "--scores-out", str(out),
                           "--method", "sentences", "--device", "cuda"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["error: --device cuda: no CUDA device here (torch.cuda.is_available() is False)"]
    assert not out.exists()  # nothing claimed, nothing read


def test_a_name_torch_does_not_know_is_refused(tmp_path):
    from solution.lexical import main

    src = write_jsonl(tmp_path / "dev.jsonl", [nq_line("7")])
    assert main(["--input", str(src), "--scores-out", str(tmp_path / "s.jsonl"), "--method", "sentences",
                 "--device", "gpu0"]) == 2
    assert not (tmp_path / "s.jsonl").exists()


@pytest.mark.parametrize("method", ["words", "bm25"])
def test_a_device_for_a_method_that_runs_no_model_is_refused(tmp_path, capsys, method):
    """Accepted, --device would have no effect on these methods: a run that reads as a GPU run and never was."""
    from solution.lexical import main

    src = write_jsonl(tmp_path / "dev.jsonl", [nq_line("7")])
    assert main(["--input", str(src), "--scores-out", str(tmp_path / "s.jsonl"), "--method", method,
                 "--device", "cuda"]) == 2
    assert f"--method {method} runs no model" in capsys.readouterr().err
    assert not (tmp_path / "s.jsonl").exists()
