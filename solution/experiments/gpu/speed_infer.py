"""The speed part's inference run (`scripts/gpu_speed.py --infer`): the model alone (windows/s timed with CUDA
events) and end to end through the library's one prediction path, in one process."""

from __future__ import annotations

import time
from pathlib import Path


def infer(args) -> dict:
    """Model-only windows/s and end-to-end windows/s through the library's prediction path, one process."""
    import torch

    from solution.answers.inference import model_runner, predict_documents
    from solution.answers.postprocess import PostprocessConfig
    from solution.data.nq import read_examples
    from solution.model.qa_model import build_model, load_tokenizer
    from solution.model.sentences import first_pass_embed
    from solution.training.config import load_config
    from solution.windows.featurizer import Featurizer

    cfg = load_config(args.config, ["--max_seq_length", str(args.seq), "--max_question_length", str(args.seq // 8),
                                    "--doc_stride", str(args.seq - args.seq // 8 - 3 - args.seq // 4),
                                    *(["--model_name_or_path", args.backbone] if args.backbone else [])])
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    model = build_model(cfg.model_name_or_path, cfg.pretrained, cfg.backbone_overrides).to(device=device, dtype=dtype)
    model.eval()
    ids = torch.randint(1000, model.config.vocab_size, (args.batch, args.seq), device=device)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
             "padded": False}
    reps = 20 if device.type == "cuda" else 2
    with torch.inference_mode():
        for _ in range(3):
            model(**batch)
        seconds = timed(lambda: [model(**batch) for _ in range(reps)], device)
    out = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "dtype": str(dtype),
           "attention": model.config._attn_implementation, "batch": args.batch, "max_seq_length": args.seq,
           "model_windows_per_s": reps * args.batch / seconds, "model_forwards": reps}
    if args.pages and Path(args.pages).is_file():
        counted = {"windows": 0}
        run = model_runner(model, device)

        def counting(b):
            counted["windows"] += int(b["input_ids"].shape[0])
            return run(b)

        tok = load_tokenizer(cfg.model_name_or_path)
        t0 = time.perf_counter()
        docs = sum(1 for _ in predict_documents(counting, Featurizer(tok, cfg.window, embed=first_pass_embed(cfg.window, device)),
                                                read_examples(args.pages),
                                                PostprocessConfig(), batch_size=64))
        wall = time.perf_counter() - t0
        out.update(end_to_end_windows_per_s=counted["windows"] / wall, end_to_end_documents=docs,
                   end_to_end_windows=counted["windows"], end_to_end_s=wall)
    return out


def timed(fn, device) -> float:
    """Seconds `fn` keeps the device busy from start to end: CUDA events on a GPU, the host clock otherwise."""
    import torch

    if device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    fn()
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1e3
