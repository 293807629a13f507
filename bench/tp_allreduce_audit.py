"""How many tensor-parallel all-reduces per layer the kernel database prices in a decode pass.

Why: issue 37 suspected the database's SGLang MoE passes at TP 4 lack the all-reduce after
attention. A TP forward needs two a layer (after attention's o_proj and after the MLP/MoE); this
compiles each model for each engine and TP, sums the pass's collective ops and divides by the
database's own all-reduce of ``tokens x hidden`` (profiler/imported/aic_allreduce.py). A row near
2.0 prices both; a row near 1.0 would lack one.

    python bench/tp_allreduce_audit.py [--system h100_sxm] [--tokens 4] [--models ...] [--tp 2,4,8]
"""

from __future__ import annotations

import argparse

from profiler.imported import aic_allreduce
from profiler.imported import aic_database as db
from profiler.imported.aiconfigurator_import import ImportRequest, _layout

MODELS = ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B", "Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B",
          "meta-llama/Llama-3.1-70B", "openai/gpt-oss-120b", "meta-llama/Llama-4-Scout-17B-16E-Instruct")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", default="h100_sxm")
    ap.add_argument("--tokens", type=int, default=4, help="rows of the decode pass")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tp", default="2,4,8")
    args = ap.parse_args()
    print(f"{'model':<44} {'engine':<17} tp  layers  collectives ms  one call us  per layer  collective ops")
    for model in args.models.split(","):
        cfg = db.model_config(model)
        text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
        hidden, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
        for backend in db.BACKENDS:
            for tp in (int(t) for t in args.tp.split(",")):
                try:
                    version = db.resolve_version(args.system, backend, None)
                    eng = db.compile_engine(model, args.system, backend, version,
                                            _layout(ImportRequest(args.system, backend, model, tp=tp)))
                    ops = eng.decode_ops(args.tokens, args.context)
                except Exception as exc:  # noqa: BLE001 - a survey row, not a failure
                    print(f"{model:<44} {backend:<17} {tp:>2}  not compiled: {str(exc)[:90]}")
                    continue
                a = aic_allreduce.audit(ops, args.tokens, hidden, layers, args.system, backend, version, tp)
                names = ", ".join(f"{k} {v:.3f}" for k, v in ops.items()
                                  if aic_allreduce.COLLECTIVE.search(k) and v > 0)
                if a is None:
                    why = ("collectives inside a composite op: " + ", ".join(k for k in ops if aic_allreduce.COMPOSITE in k)
                           if any(aic_allreduce.COMPOSITE in k for k in ops) else "no all-reduce table")
                    print(f"{model:<44} {backend + ' ' + version:<17} {tp:>2}  not countable ({why})")
                    continue
                print(f"{model:<44} {backend + ' ' + version:<17} {tp:>2}  {layers:>6}  {a.collective_ms:>14.3f}  "
                      f"{a.one_call_ms * 1e3:>11.2f}  {a.per_layer:>9.2f}  {names}")


if __name__ == "__main__":
    main()
