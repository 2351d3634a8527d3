"""`gpucli embed`'s options: each field becomes a flag, a TOML key and a GPUCLI_* variable
(gpucli/core/config.py), checked here on construction, before any model is opened. What a model
refuses (an image-text model and --backend onnx) is its task's to say, once it has read the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpucli.core.vectors import VECTOR_TYPES
from gpucli.inputs.documents import OCR_MODES
from gpucli.inputs.encodings import NamedEncodings
from gpucli.models.backends import BACKENDS, QUANTIZATIONS

SPARSE_KINDS = ("", "bm25")  # --sparse


@dataclass(frozen=True)
class EmbedOptions:
    chunk_tokens: int = field(default=0, metadata={
        "help": "Tokens per chunk, special tokens included (0 = the model's maximum).", "flag": "--chunk-tokens"})
    chunk_overlap: int = field(default=32, metadata={
        "help": "Tokens shared by consecutive chunks of a long document.", "flag": "--chunk-overlap"})
    # --- model fidelity: None = as the model's modules say ----------------------------------------
    normalize: bool | None = field(default=None, metadata={
        "help": "L2-normalise vectors, or not, whatever the model's modules say.", "flag": "--normalize/--no-normalize",
        "default_help": "as the model's modules say; on for a model without them"})
    prompt: str = field(default="", metadata={
        "help": "Name of a prompt in the model's config_sentence_transformers.json to put before every chunk.",
        "flag": "--prompt", "default_help": "its document/passage/corpus prompt, else its default one"})
    prefix: str = field(default="", metadata={
        "help": "Text to put before every chunk, instead of a named prompt.", "flag": "--prefix",
        "default_help": "none"})
    # --- end model fidelity --------------------------------------------------------------------------------
    # --- documents: neither changes a vector, so neither is in the output's fingerprint ---------
    allow_unknown_tokens: bool = field(default=False, metadata={
        "help": "Embed inputs even when over 20% of their words' tokens are unknown to the model (a language "
                "its vocabulary does not cover: such vectors are poor). Without it they are failure records "
                "naming a model that reads them.", "flag": "--allow-unknown-tokens",
        "default_help": "off", "fingerprint": False})
    allow_other_scripts: bool = field(default=False, metadata={
        "help": "Embed inputs even when most of their letters are in scripts none of the model's languages is "
                "written in (Cyrillic for an English model: such vectors are poor). Without it they are failure "
                "records naming a model that reads them (docs/languages.md).", "flag": "--allow-other-scripts",
        "default_help": "off", "fingerprint": False})
    # --- encodings (docs/encodings.md): a file that decoded keeps its text, so not in the fingerprint ---
    encoding: tuple[str, ...] = field(default=(), metadata={
        "help": "The encoding of text files that are neither UTF-8 nor marked by a byte-order mark, for those "
                "whose encoding the evidence cannot decide (they are failure records that say so): NAME for "
                "every file, or 'GLOB=NAME' for the files a glob matches (repeatable; a list in the config).",
        "flag": "--encoding", "default_help": "decided by evidence, refused on a tie", "fingerprint": False})
    extract_timeout: float = field(default=120.0, metadata={
        "help": "Seconds one document (PDF, DOCX, HTML...) may take to extract; a slower one becomes a failure "
                "record and the run goes on.", "flag": "--extract-timeout", "fingerprint": False})
    # --- OCR (docs/ocr.md). Off by default: an output keeps the columns and the settings it had
    # before OCR existed; "unless-default": auto or on is a setting of the output ------------------------------
    ocr: str = field(default="off", metadata={
        "help": "OCR (on the CPU, in the reader): auto reads PDF pages without a text layer (scans) by OCR; on "
                "also reads image files (.png, .jpg, .tif...) as text; off reads text layers only (a scan is a "
                "failure record that says so). A page with a text layer is never OCR'd. Rows get an `ocr` "
                "column unless off. Needs pip install 'gpucli[ocr]'.",
        "flag": "--ocr", "fingerprint": "unless-default"})
    # --- end documents ---------------------------------------------------------------------------------------
    # --- the vectors users ask for. "unless-default": in the fingerprint only when given, so that an
    # output made before these options existed (at their defaults) stays incremental -----------------------------
    dims: int = field(default=0, metadata={
        "help": "Keep the first N dimensions of each vector (Matryoshka models), renormalised when the model "
                "normalises; refused above the model's dims, or for a model that gives no sign of Matryoshka "
                "training, unless --force-dims.", "flag": "--dims", "default_help": "all the model's",
        "fingerprint": "unless-default"})
    force_dims: bool = field(default=False, metadata={
        "help": "Allow --dims for a model that gives no sign of Matryoshka training.", "flag": "--force-dims",
        "default_help": "off", "fingerprint": False})
    vector_type: str = field(default="float32", metadata={
        "help": "How vectors are stored: float32, float16, int8 (calibrated on the output's first vectors) or "
                "binary (one bit per dimension, searched by Hamming distance); Qdrant quantizes in its own way.",
        "flag": "--vector-type", "fingerprint": "unless-default"})
    sparse: str = field(default="", metadata={
        "help": "bm25: also store a sparse lexical vector per chunk (term weights over the model's tokenizer "
                "vocabulary) for hybrid search; Qdrant gets a named sparse vector with its idf modifier.",
        "flag": "--sparse", "default_help": "none", "fingerprint": "unless-default"})
    dedup: bool = field(default=True, metadata={
        "help": "Embed identical content once: an input whose content digest was embedded already (in this run, "
                "or in the output with the same settings) gets copies of those rows, without a forward pass.",
        "flag": "--dedup/--no-dedup", "default_help": "on", "fingerprint": False})
    # --- end the vectors users ask for ----------------------------------------------------------------------
    backend: str = field(default="torch", metadata={
        "help": "Inference runtime: torch; onnx (ONNX Runtime: the model is exported once into "
                "~/.cache/gpucli/onnx); auto (onnx on a host without a GPU for a "
                "BERT-type model, or with --quantize; else torch). "
                "Decided once per output: a rerun keeps the output's own.",
        "flag": "--backend", "default_help": "auto for a new output (on Ray with --devices cpu only; else torch); "
                                             "an existing output's own"})
    quantize: str = field(default="", metadata={
        "help": "int8: dynamic int8 quantization of the ONNX model (about 1.5-2x fp32 ONNX on CPU; cosine to fp32 "
                ">= 0.98 on sentences). Part of the output's fingerprint: rows never mix.",
        "flag": "--quantize", "default_help": "none (fp32)"})

    @property
    def allows_any_script(self) -> bool:
        """--allow-other-scripts, or --allow-unknown-tokens (which asks for the text embedded whatever its language)."""
        return self.allow_other_scripts or self.allow_unknown_tokens

    def __post_init__(self) -> None:
        object.__setattr__(self, "encoding", tuple(self.encoding))
        NamedEncodings.parse(self.encoding)  # a ValueError naming the one Python does not know
        if self.backend not in BACKENDS:
            raise ValueError(f"--backend must be one of {', '.join(BACKENDS)}")
        if self.quantize not in QUANTIZATIONS:
            raise ValueError("--quantize must be int8 or empty")
        if self.chunk_tokens < 0 or self.chunk_overlap < 0:
            raise ValueError("--chunk-tokens and --chunk-overlap must be 0 or positive")
        if self.ocr not in OCR_MODES:
            raise ValueError(f"--ocr must be one of {', '.join(OCR_MODES)}")
        if not self.extract_timeout > 0:
            raise ValueError("--extract-timeout must be above 0 seconds")
        if self.dims < 0:
            raise ValueError("--dims must be 0 (all) or positive")
        if self.vector_type not in VECTOR_TYPES:
            raise ValueError(f"--vector-type must be one of {', '.join(VECTOR_TYPES)}")
        if self.sparse not in SPARSE_KINDS:
            raise ValueError("--sparse must be bm25 or empty")
