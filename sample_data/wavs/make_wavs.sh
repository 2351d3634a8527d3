#!/usr/bin/env bash
# Regenerate the sample WAV clips from transcripts.tsv with espeak-ng + sox.
# Output: 16 kHz, mono, 16-bit signed PCM WAV, 1 dB of headroom (no clipping),
# with 0.25 s of silence at each end.
# Needs: espeak-ng, sox   (Debian/Ubuntu: apt-get install -y espeak-ng sox)
# Usage: sample_data/wavs/make_wavs.sh            (from any directory)
# transcripts.tsv is the single source of truth: header line "file<TAB>text",
# then one clip per line. Made with espeak-ng 1.51 and SoX 14.4.2 (output is
# byte-identical on rerun); other versions may give slightly different audio
# but the same sentences.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
voice="${ESPEAK_VOICE:-en-us}"
speed="${ESPEAK_SPEED:-150}"   # words per minute; a little slower than espeak-ng's default 175

for tool in espeak-ng sox soxi; do
  command -v "$tool" >/dev/null || { echo "make_wavs.sh: $tool not found (apt-get install -y espeak-ng sox)" >&2; exit 2; }
done

tail -n +2 "$here/transcripts.tsv" | while IFS=$'\t' read -r file text; do
  [ -n "$file" ] || continue
  espeak-ng -v "$voice" -s "$speed" --stdout "$text" \
    | sox -D -t wav - -r 16000 -c 1 -b 16 -e signed-integer "$here/$file" gain -1 rate 16000 pad 0.25 0.25
  printf '%s\t%ss\t%s\n' "$file" "$(soxi -D "$here/$file")" "$text"
done
