"""faster-whisper in a transcribe worker: batched decoding of chunks of many files, and their
words' alignment (tasks/transcribe/word_times.py), from which a recording's segments are cut where its
sentences and pauses are (tasks/transcribe/segments.py), and which --word-timestamps also keeps as a column.
The model's resolution and the compute type are tasks/transcribe/task.py's; this module only runs the
model it is given.
"""

from __future__ import annotations

from typing import Any

from gpucli.tasks.transcribe import audio, word_times
from gpucli.tasks.transcribe.options import TranscribeOptions


class WhisperRunner:
    """faster-whisper's batched decoding, fed with chunks of many files: features for each
    chunk, one encoder call for the batch, one batched beam search (no timestamps, no
    temperature fallback, as `BatchedInferencePipeline` does); then one alignment per language in
    the batch, as `BatchedInferencePipeline(word_timestamps=True)` does: always, since the words'
    times are what a recording's segments are cut by (measured: a small part of the decoding's time,
    benchmarks/subtitles.py)."""

    def __init__(self, path: str, device: str, threads: int, options: TranscribeOptions, compute_type: str) -> None:
        from faster_whisper import WhisperModel

        kind, _, index = device.partition(":")
        kind = "cuda" if kind == "cuda" else "cpu"
        self.options = options
        self.model = WhisperModel(path, device=kind, device_index=int(index or 0), compute_type=compute_type,
                                  cpu_threads=threads if kind == "cpu" else 0, local_files_only=True)
        self.multilingual = self.model.model.is_multilingual
        self._tokenizers: dict[str, Any] = {}

    def tokenizer(self, language: str) -> Any:
        if language not in self._tokenizers:
            from faster_whisper.tokenizer import Tokenizer
            from faster_whisper.transcribe import get_suppressed_tokens

            tok = Tokenizer(self.model.hf_tokenizer, self.multilingual, task="transcribe", language=language)
            prompt = self.model.get_prompt(tok, previous_tokens=[], without_timestamps=True)
            self._tokenizers[language] = (tok, prompt, get_suppressed_tokens(tok, [-1]))
        return self._tokenizers[language]

    def predict(self, chunks: list[Any]) -> list[dict[str, Any]]:
        import numpy as np
        from faster_whisper.audio import pad_or_trim

        extract = self.model.feature_extractor
        features = np.stack([pad_or_trim(extract(c.astype(np.float32) / 32768.0)[..., :-1]) for c in chunks])
        encoded = self.model.encode(features)
        languages = self._languages(encoded, len(chunks))
        prompts, suppress = [], None
        for language in languages:
            _, prompt, suppress = self.tokenizer(language)
            prompts.append(list(prompt))
        results = self.model.model.generate(
            encoded, prompts, beam_size=self.options.beam_size, patience=1, length_penalty=1,
            max_length=self.model.max_length, suppress_blank=True, suppress_tokens=suppress,
            return_scores=True, return_no_speech_prob=True, sampling_temperature=0.0,
            repetition_penalty=1, no_repeat_ngram_size=0)
        outputs = [self._output(result, language) for result, language in zip(results, languages)]
        self._add_words(outputs, results, languages, features, encoded, [len(c) / audio.SAMPLE_RATE for c in chunks])
        return outputs

    def _languages(self, encoded: Any, count: int) -> list[str]:
        if not self.multilingual:
            return ["en"] * count
        if self.options.language:
            return [self.options.language] * count
        detected = self.model.model.detect_language(encoded)
        return [langs[0][0][2:-2] for langs in detected]

    def _output(self, result: Any, language: str) -> dict[str, Any]:
        tok = self.tokenizer(language)[0]
        tokens = result.sequences_ids[0]
        text = tok.decode(tokens)
        if not self.options.vad and _is_silence(result, len(tokens)):
            text = ""  # without VAD, Whisper's own no-speech rule keeps invented words out
        return {"text": text, "language": language}

    def _add_words(self, outputs: list[dict[str, Any]], results: list[Any], languages: list[str], features: Any,
                   encoded: Any, seconds: list[float]) -> None:
        """Each output's words, in its chunk's time: the chunks with text, aligned per language
        (the alignment reads one tokenizer; a batch of one language, the usual case, reuses the
        encoder's output, another language's chunks are encoded again)."""
        for output in outputs:
            output["words"] = []
        with_text = [i for i, out in enumerate(outputs) if out["text"].strip()]
        for language in dict.fromkeys(languages[i] for i in with_text):
            group = [i for i in with_text if languages[i] == language]
            states = encoded if len(group) == len(outputs) else self.model.encode(features[group])
            words = word_times.align_words(self.model, self.tokenizer(language)[0], states,
                                            [results[i].sequences_ids[0] for i in group], [seconds[i] for i in group])
            for i, chunk_words in zip(group, words):
                outputs[i]["words"] = chunk_words


def _is_silence(result: Any, length: int) -> bool:
    avg_logprob = result.scores[0] * length / (length + 1)
    return result.no_speech_prob > 0.6 and avg_logprob < -1.0
