"""Apple silicon's ``mps`` device, simulated (no Mac here): chosen when PyTorch says it is available,
fp32 there, and every tensor the package moves goes to the model's device."""

import pytest
import torch
from helpers import SENTENCES, tokenised

from hp_mlm import common, evaluation, inference, prepare
from hp_mlm.config import get_settings
from hp_mlm.masking import freeze_masks
from hp_mlm.ops import job

MPS = torch.device("mps")


@pytest.fixture()
def apple_silicon(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)


def test_mps_is_chosen_when_available_and_auto_precision_is_fp32_there(apple_silicon):
    assert common.device_kind() == "mps" and common.run_device() == MPS
    assert common.resolve_precision("auto") == "fp32" == common.resolve_precision("fp32")
    for forced in ("bf16", "fp16"):
        with pytest.raises(ValueError, match=f"precision {forced} on Apple's mps device was not measured"):
            common.resolve_precision(forced)
    assert job.describe_device() == "mps (Apple silicon)"
    assert get_settings("smoke", environ={}).precision == "auto"


def test_without_mps_or_cuda_the_run_stays_on_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert common.device_kind() == "cpu" and common.run_device() == torch.device("cpu")


def test_the_model_goes_to_mps_and_every_input_follows_it(apple_silicon, monkeypatch, smoke_tokenizer, smoke_model):
    moved_models, moved_tensors = [], []
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: moved_models.append(a[0]) or self)
    prepare.prepare(get_settings("smoke", environ={}, progress=False))
    assert moved_models == [MPS]  # the "before" evaluation already runs there

    real_to = torch.Tensor.to

    def to(self, *args, **kwargs):  # a tensor sent to mps stays on the CPU here, and is counted
        if args and isinstance(args[0], torch.device) and args[0].type == "mps":
            moved_tensors.append(tuple(self.shape))
            return self
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    for module in (evaluation, inference):
        monkeypatch.setattr(module, "model_device", lambda model: MPS)
    frozen = freeze_masks(tokenised(smoke_tokenizer, SENTENCES), smoke_tokenizer, seed=0)
    evaluation.evaluate(smoke_model, frozen, smoke_tokenizer, batch_size=4)
    assert len(moved_tensors) == 3 * 2  # labels, input_ids, attention_mask of each of 2 batches
    moved_tensors.clear()
    inference.fill_mask(smoke_model, smoke_tokenizer, ["Mira [MASK] crossed the lake."])
    assert len(moved_tensors) == 2  # input_ids and attention_mask


@pytest.mark.parametrize(("major", "expected"), [(7, "fp16"), (8, "bf16"), (9, "bf16")])
def test_auto_on_a_t4_is_fp16_although_torch_counts_its_emulated_bf16(major, expected, monkeypatch):
    """A T4 (compute capability 7.5) emulates bf16, slower than fp16 with loss scaling; the library's
    ``is_bf16_supported()`` says True there by default (it counts emulation)."""
    from types import SimpleNamespace

    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(major=major))
    assert common.cuda_has_native_bf16() is (major >= 8)
    assert common.resolve_precision("auto", "cuda") == expected
