"""The allocator setting kept while training on the CPU: freed memory is reused, and undone after."""

import resource

import pytest
import torch

from hp_mlm.ops import allocator

needs_glibc = pytest.mark.skipif(allocator.glibc() is None, reason="the setting only applies to glibc")
PAGES = 64 * 2**20 // 4096  # a 64 MB tensor: above glibc's largest mmap threshold (32 MB)


def faults_of_second_fill() -> int:
    """Minor page faults while a 64 MB tensor is filled again after one of the same size was freed."""
    first = torch.empty(PAGES * 1024, dtype=torch.float32).fill_(1.0)
    del first
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.empty(PAGES * 1024, dtype=torch.float32).fill_(2.0)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@needs_glibc
def test_freed_memory_is_reused_inside_the_block_and_given_back_after():
    outside = faults_of_second_fill()
    with allocator.reuse_freed_memory() as switched:
        # the heap grows over the first few rounds (how many depends on what came before), then holds
        inside = [faults_of_second_fill() for _ in range(6)][-1]
    after = faults_of_second_fill()
    assert switched is True
    # 4 kB pages fault 16,384 times for 64 MB; with transparent huge pages always on, about 32 times
    assert outside >= 16, "glibc's default maps a 64 MB block afresh each time"
    assert inside * 10 <= outside, f"{inside} faults against {outside}: the freed block should have been reused"
    assert after * 2 >= outside, "the defaults come back when the block ends"


def test_disabled_or_without_glibc_nothing_changes(monkeypatch):
    with allocator.reuse_freed_memory(enabled=False) as switched:
        assert switched is False
    monkeypatch.setattr(allocator, "glibc", lambda: None)
    with allocator.reuse_freed_memory() as switched:
        assert switched is False


def test_the_main_jobs_training_switches_it_on_the_cpu_only(monkeypatch):
    from hp_mlm.ops import job

    seen = []

    def record(enabled=True):
        seen.append(enabled)
        return allocator.reuse_freed_memory(enabled=False)

    monkeypatch.setattr(job, "reuse_freed_memory", record)

    class Plan:  # just enough of a TrainingPlan for train() to run no epoch
        class accelerator:
            class device:
                type = "cpu"

        class settings:
            epochs = 0

        start_epoch, history = 0, {}
        model = torch.nn.Linear(1, 1)

        def start(self):
            pass

    job.run_training(Plan(), [])
    Plan.accelerator.device.type = "cuda"
    job.run_training(Plan(), [])
    assert seen == [True, False]


def test_training_gives_the_same_weights_with_or_without_it(monkeypatch, smoke_tokenizer):
    """Only where memory comes from changes: the losses and the weights are bitwise the same."""
    from helpers import SENTENCES, fit, tokenised

    from hp_mlm.config import get_settings
    from hp_mlm.models import build_smoke_model
    from hp_mlm.ops import job

    settings = get_settings("smoke", environ={}, epochs=2, batch_size=4, progress=False, precision="fp32")
    rows = tokenised(smoke_tokenizer, SENTENCES * 2)
    runs = []
    for enabled in (True, False):
        monkeypatch.setattr(
            job, "reuse_freed_memory", lambda on, keep=enabled: allocator.reuse_freed_memory(on and keep)
        )
        model = build_smoke_model(smoke_tokenizer)
        history = fit(model, smoke_tokenizer, rows, settings)
        runs.append(([s["loss"] for s in history["steps"]], model.state_dict()))
    (losses_on, weights_on), (losses_off, weights_off) = runs
    assert len(losses_on) >= 4 and losses_on == losses_off
    assert all(torch.equal(weights_on[k], weights_off[k]) for k in weights_on)
