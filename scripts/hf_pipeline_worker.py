"""Runs our weights through transformers' `pipeline("question-answering")`, for scripts/benchmark_inference.py.

    PYTHONPATH=<transformers 4.x dir> python scripts/hf_pipeline_worker.py JOB.json

transformers 5 removed the question-answering pipeline, and the project
pins transformers 5, so the benchmark installs the last 4.x release into a
side folder and runs this script with it first on the path. It imports only
torch, safetensors and that transformers: not the project's code, which
needs transformers 5.

JOB.json: model_dir, questions, contexts, window settings, batch_size,
repeats, device (optional, default cpu), and a probe (question, context and the start logits our model
gives for them), so that the pipeline is shown to run the same model.
Prints one JSON object: seconds (best of repeats), documents, windows.
"""

import argparse
import json
import sys
import time


def main(job_path: str) -> int:
    # Imported here, so that --help answers at once.
    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForQuestionAnswering, AutoTokenizer, pipeline

    job = json.loads(open(job_path, encoding="utf-8").read())
    d = job["model_dir"]
    config = AutoConfig.from_pretrained(d)
    qa = AutoModelForQuestionAnswering.from_config(config)
    state = load_file(f"{d}/model.safetensors")
    prefix = qa.base_model_prefix  # "bert" for BERT: our backbone.* is its base model
    mapped = {(f"{prefix}." + k[len("backbone."):] if k.startswith("backbone.") else k): v for k, v in state.items()
              if not k.startswith("answer_type_head.")}
    missing, unexpected = qa.load_state_dict(mapped, strict=False)
    if unexpected or [k for k in missing if "pooler" not in k]:
        sys.exit(f"hf_pipeline_worker: weights do not fit {type(qa).__name__}: missing {missing}, "
                 f"unexpected {unexpected}")
    device = job.get("device", "cpu")
    qa.eval()
    tokenizer = AutoTokenizer.from_pretrained(d, use_fast=True)
    probe = job["probe"]
    enc = tokenizer(probe["question"], probe["context"], return_tensors="pt")
    with torch.inference_mode():
        got = qa.to(device)(**enc.to(device)).start_logits[0].float().cpu()
    want = torch.tensor(probe["start_logits"])
    if got.shape != want.shape or not torch.allclose(got, want, atol=1e-3):
        sys.exit("hf_pipeline_worker: the transformers QA model does not reproduce our start logits")
    pipe = pipeline("question-answering", model=qa, tokenizer=tokenizer, device=device)
    w = job["window"]
    kwargs = dict(max_seq_len=w["max_seq_length"], doc_stride=w["doc_stride"],
                  max_question_len=w["max_question_length"], max_answer_len=30, batch_size=job["batch_size"])
    q, c = job["questions"], job["contexts"]
    pipe(question=q[:2], context=c[:2], **kwargs)  # warm-up
    best = float("inf")
    for _ in range(job["repeats"]):
        t0 = time.perf_counter()
        pipe(question=q, context=c, **kwargs)
        best = min(best, time.perf_counter() - t0)
    # The windows it cut: its own tokenisation with overflow, as the pipeline does it.
    enc = tokenizer(q, c, truncation="only_second", max_length=w["max_seq_length"], stride=w["doc_stride"],
                    return_overflowing_tokens=True, padding=False)
    print(json.dumps({"seconds": best, "documents": len(q), "windows": len(enc["input_ids"]),
                      "transformers": transformers.__version__, "threads": torch.get_num_threads()}))
    return 0


if __name__ == "__main__":
    # Plain argparse, not solution.common.cli: this worker runs under transformers 4.x and imports none of our code.
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job", metavar="JOB.json", help="the job benchmark_inference.py writes")
    sys.exit(main(parser.parse_args().job))
