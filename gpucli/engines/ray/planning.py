"""How many predictor and reader actors, with what resources: from the Ray this process joined
(its resources, not this machine's), --devices and --workers-per-device."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpucli.core.config import RunConfig
from gpucli.core.errors import UsageError

READ_CPUS = 0.5  # per reader actor: reading and tokenising leave room for the predictors
# ...left free in the plan, but not asked of Ray: a reader actor that asks for CPU cannot be
# placed again when its node goes and the predictors fill the nodes left (the run hung so)
READER_ACTOR_CPUS = 0.0


@dataclass(frozen=True)
class Plan:
    """How many predictor actors, with what resources (from the cluster, not this machine)."""

    actors: int
    num_cpus: float
    num_gpus: float
    device: str  # "cuda:0" (Ray sets CUDA_VISIBLE_DEVICES to the actor's GPU) or "cpu"
    threads: int  # torch threads per actor; 0: as many as its node has CPUs (`node_threads`)
    readers: int  # most reader actors
    node_threads: dict[str, int] = field(default_factory=dict)  # threads by node id, for threads 0

    def actor_threads(self) -> int | dict[str, int]:
        """What a predictor is told: its thread count, or threads by node id (each actor looks
        up its own node: the plan is made in the driver, which cannot know where Ray puts it)."""
        return self.threads or self.node_threads


def make_plan(config: RunConfig) -> Plan:
    """The plan for the Ray this process joined."""
    import ray

    resources = ray.cluster_resources()
    node_cpus = {n["NodeID"]: float(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")}
    return plan_for(config.devices, config.workers_per_device or 0, float(resources.get("CPU", 1)),
                    int(resources.get("GPU", 0)), node_cpus)


def plan_for(devices: str, per: int, cpus: float, gpus: int, node_cpus: dict[str, float] | None = None) -> Plan:
    """Predictor actors from --devices and --workers-per-device (`per`, 0 when not given), and
    the cluster's CPUs and GPUs (`node_cpus`: each live node's, by node id).

    GPUs: one actor per GPU times --workers-per-device (each takes 1/that of a GPU).
    CPU: one actor per node that has CPUs (Ray Data spreads an actor pool over the nodes), each
    running as many threads as its own node has CPUs (threads 0: decided on the node, where the
    nodes differ in size), or --workers-per-device actors in all, each with its share of the
    cluster's CPUs. Fractional CPU asks, so that the readers and the driver's output never starve
    (two actors x 1 CPU on a 2-CPU node deadlock reads and writes).
    """
    readers = max(1, min(8, int(cpus // 4)))
    if _wants_gpu(devices, gpus):
        per = per or 1
        actors = gpus * per
        num_cpus = min(1.0, max(0.25, (cpus - READ_CPUS) / actors))
        return Plan(actors, round(num_cpus, 2), 1.0 / per, "cuda:0", max(1, min(4, int(cpus // actors))), readers)
    actors = per or (len([c for c in (node_cpus or {}).values() if c >= 1]) or 1)
    num_cpus = min(1.0, max(0.1, (cpus - READ_CPUS) / actors))
    return Plan(actors, round(num_cpus, 2), 0.0, "cpu", max(1, int(cpus // per)) if per else 0, readers,
                {node: max(1, int(c)) for node, c in (node_cpus or {}).items() if c > 0})


def placeable(plan: Plan, nodes: list[dict]) -> bool:
    """Whether some live node of the cluster (`ray.nodes()`) can hold a predictor actor: once
    none can (the nodes that could are gone), Ray Data would wait for them forever. (Readers ask
    for no CPU: any live node holds one.)"""
    return any(n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= plan.num_cpus - 1e-9
               and n.get("Resources", {}).get("GPU", 0) >= plan.num_gpus - 1e-9 for n in nodes)


def chunks_per_call(window_items: int, chunk_files: int) -> int:
    """Reader rows (one per chunk of `chunk_files` files) per predictor call: about the local
    dispatcher's sorted window of items, counting an item per file (a file of several items
    makes the window larger, never smaller than one chunk)."""
    return max(1, window_items // max(1, chunk_files))


def _wants_gpu(devices: str, gpus: int) -> bool:
    spec = devices.strip().lower()
    if spec == "cpu":
        return False
    if spec in ("", "auto"):
        return gpus > 0
    if spec in ("cuda", "gpu"):
        if not gpus:
            raise UsageError("--devices cuda: the Ray cluster has no GPUs; use --devices cpu or auto")
        return True
    raise UsageError(f"--devices {devices!r}: with --engine ray use auto, cpu or cuda (every GPU of the cluster); "
                     "pick GPUs with CUDA_VISIBLE_DEVICES where Ray starts, and GPUs per actor with "
                     "--workers-per-device")
