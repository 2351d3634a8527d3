"""Zero-shot scores in a worker: the label prompts through the text tower once, then each batch
of images through the vision tower and scored against them, as transformers'
zero-shot-image-classification pipeline scores them.

    prompts   tokenized by the model's own tokenizer (AutoTokenizer), as the pipeline does:
              CLIP (and every type but SigLIP) padded to the longest prompt; SigLIP padded to
              the text tower's length (the pipeline's 64, which is every released SigLIP's
              tower), with what the tokenizer returns (the Hub's SigLIP tokenizer returns no
              attention mask). A prompt longer than the tower is refused before a run
              (`check_prompts`), not truncated: two labels would silently become one.
    logits    logit_scale.exp() * cosine(image, prompt) (+ logit_bias for SigLIP), the
              model's own `logits_per_image`
    scores    SigLIP: sigmoid, each label on its own (they need not sum to one); the others:
              softmax over the labels given
    order     best first; equal scores keep the labels' order (a stable sort, as the pipeline's
              `sorted`), then the first top-k

The text vectors are computed once per worker (in chunks of PROMPT_CHUNK prompts: a list of
thousands of labels needs no more memory than a batch), then one matrix product per batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucli.core.errors import UsageError
from gpucli.tasks.image_text.towers import Towers

PROMPT_CHUNK = 256


def is_sigmoid(model_type: str) -> bool:
    """SigLIP scores each label alone (the pipeline: `"siglip" in model_type`)."""
    return "siglip" in model_type


def load_tokenizer(model: str, path: str) -> Any:
    """The model's own tokenizer (transformers' AutoTokenizer, as the pipeline loads it)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - any miss is the same advice
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"--labels: model {model!r} has no tokenizer transformers can load ({first}); zero-shot "
                         "labels are read by its text tower, whose tokenizer must be in the model directory") from None


def prompt_inputs(tokenizer: Any, prompts: list[str], model_type: str, positions: int) -> dict[str, Any]:
    """The prompts as the pipeline tokenizes them, as torch tensors."""
    padding: dict[str, Any] = {"padding": True}
    if is_sigmoid(model_type):
        padding = {"padding": "max_length", "max_length": positions, "truncation": True}
    return dict(tokenizer(prompts, return_tensors="pt", **padding))


def check_prompts(model: str, tokenizer: Any, labels: tuple[str, ...], prompts: list[str], positions: int) -> None:
    """Refuse a prompt longer than the text tower, and two labels that are one text to the model
    (SigLIP's tokenizer lowercases and drops punctuation: "Cat" and "cat!" score the same)."""
    ids = tokenizer(prompts)["input_ids"]
    longest = max(range(len(ids)), key=lambda i: len(ids[i]))
    if len(ids[longest]) > positions:
        raise UsageError(f"--labels: the prompt {prompts[longest]!r} is {len(ids[longest])} tokens; the text tower of "
                         f"{model} reads {positions}. Shorten the label or --label-template")
    first: dict[tuple[int, ...], str] = {}
    for label, row in zip(labels, ids):
        other = first.setdefault(tuple(row), label)
        if other != label:
            raise UsageError(f"--labels: {other!r} and {label!r} are the same text to {model}'s tokenizer (it "
                             "drops case or punctuation): they would get the same score; give one of them")


@dataclass(frozen=True)
class LabelScorer:
    towers: Towers
    texts: Any  # (labels, dims) float32 tensor of the prompts' unit vectors, on the CPU
    scale: float  # logit_scale.exp()
    bias: float  # logit_bias (SigLIP), else 0
    sigmoid: bool

    @staticmethod
    def load(towers: Towers, tokenizer: Any, prompts: list[str], model_type: str, positions: int) -> LabelScorer:
        import torch

        net = towers.model
        chunks = [_text_vectors(towers, prompt_inputs(tokenizer, prompts[i: i + PROMPT_CHUNK], model_type, positions))
                  for i in range(0, len(prompts), PROMPT_CHUNK)]
        bias = getattr(net, "logit_bias", None)
        return LabelScorer(towers, torch.cat(chunks), float(net.logit_scale.detach().float().exp()),
                           0.0 if bias is None else float(bias.detach().float()), is_sigmoid(model_type))

    def scores(self, batch: np.ndarray) -> Any:
        """(images, labels) float32 scores of an (N, H, W, 3) uint8 batch."""
        import torch

        images = torch.from_numpy(self.towers.images(batch))  # unit rows (Towers normalises)
        with torch.inference_mode():
            logits = self.scale * images @ self.texts.T + self.bias
            return logits.sigmoid() if self.sigmoid else logits.softmax(dim=-1)

    def top(self, batch: np.ndarray, k: int) -> tuple[list[list[float]], list[list[int]]]:
        """Each image's k best scores and their labels' indices, best first (ties in list order)."""
        import torch

        ordered, ids = torch.sort(self.scores(batch), dim=-1, descending=True, stable=True)
        return ordered[:, :k].tolist(), ids[:, :k].tolist()


def _text_vectors(towers: Towers, inputs: dict[str, Any]) -> Any:
    """The prompts' unit vectors (float32, CPU), from the text tower on the towers' device."""
    import torch

    with torch.inference_mode():
        features = towers.model.get_text_features(**{k: v.to(towers.device) for k, v in inputs.items()})
        features = features if isinstance(features, torch.Tensor) else features.pooler_output  # transformers 5
        return torch.nn.functional.normalize(features.float(), dim=-1).cpu()
