"""Extract what specs/examples/llama2_7b_zero1_zhejiang.yaml and its test need from the Zhejiang Lab
trace (github zhejianglab/Zhejiang-Lab-Cluster-Traces, CC-BY 4.0): the optimizer steps' log times and
the job's configuration as the master's training log prints them.

Usage: python extract.py TRACE_CHECKOUT   (writes steps.csv and job.json beside this file)
"""

from __future__ import annotations

import csv
import datetime
import json
import re
import sys
from pathlib import Path

LOG = "cluster_2000_A100/taskinfo/20240429-0613-4/llama2-7b-new-5b-2b1ef-master.log"
HERE = Path(__file__).resolve().parent


def main(trace: Path) -> None:
    text = (trace / LOG).read_text(errors="replace")
    steps: dict[int, tuple[str, float]] = {}
    for m in re.finditer(r"^\[(\S+ \S+)\] \[INFO\] \[hf_trainer.py:\d+:on_log\].*?iter: (\d+)/\d+,.*?([\d.]+)s/it",
                         text, re.M):
        steps.setdefault(int(m.group(2)), (m.group(1), float(m.group(3))))
    with (HERE / "steps.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "logged_at", "step_s", "tqdm_s_per_it"])
        prev: datetime.datetime | None = None
        for step in sorted(steps):
            at, rate = steps[step]
            t = datetime.datetime.strptime(at, "%Y-%m-%d %H:%M:%S,%f")
            w.writerow([step, at, f"{(t - prev).total_seconds():.3f}" if prev and step - 1 in steps else "", rate])
            prev = t
    config = json.loads("{" + re.search(r"Model config LlamaConfig \{\n(.*?^\})", text, re.M | re.S).group(1))
    zero = re.search(r"zero_config \.+ (.*)$", text, re.M).group(1)
    job = {
        "source": f"zhejianglab/Zhejiang-Lab-Cluster-Traces {LOG}",
        "license": "CC-BY 4.0, Zhejiang Lab",
        "model_config": {k: config[k] for k in ("architectures", "hidden_size", "intermediate_size",
                                                "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                                                "vocab_size", "tie_word_embeddings", "torch_dtype")},
        "trainable_parameters": int(re.search(r"Number of trainable parameters = ([\d,]+)", text).group(1)
                                    .replace(",", "")),
        "world_size": int(re.search(r"world_size \.+ (\d+)", text).group(1)),
        "gradient_accumulation_steps": int(re.search(r"gradient_accumulation_steps \.+ (\d+)", text).group(1)),
        "train_micro_batch_size_per_gpu": int(re.search(r"train_micro_batch_size_per_gpu +(\d+)", text).group(1)),
        "bf16": "Creating torch.bfloat16 ZeRO stage 1 optimizer" in text,
        "zero_config": {k: v for k, v in re.findall(r"(\w+)=(\S+)", zero)
                        if k in ("stage", "reduce_scatter", "reduce_bucket_size", "use_multi_rank_bucket_allreduce",
                                 "allgather_bucket_size", "overlap_comm", "contiguous_gradients")},
        "offload_optimizer_device": re.search(r"offload_optimizer=\w+\(device='(\w+)'", zero).group(1),
        "nccl_version": re.search(r"NCCL version (\S+)", text).group(1),
        "nics": sorted(set(re.findall(r"\[\d\](mlx5_\d+):1/RoCE", text))),
        "nccl_channels": int(re.search(r"(\d+) coll channels", text).group(1)),
    }
    (HERE / "job.json").write_text(json.dumps(job, indent=2) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
