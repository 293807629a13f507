"""One reader per trace format (azure, mooncake, burstgpt, vllm_bench, generic); the dispatcher
that picks one from the scenario is sim/contracts/trace.py."""
