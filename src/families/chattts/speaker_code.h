// ChatTTS speaker strings ("spk_emb"): the text form of a speaker embedding that users copy from
// ChatTTS. ChatTTS (ChatTTS/model/speaker.py, Speaker._encode and _decode) writes the embedding
// as little-endian float16 values, compresses them as a raw LZMA2 stream (xz preset
// 9 | extreme, no container) and writes the bytes as base16384 text (fumiama/base16384, through
// pybase16384: every 7 bytes become 4 characters of U+4E00..U+8DFF; a last, partial group of
// 1..6 bytes is followed by U+3D01..U+3D06 naming its length). There is no prefix or marker:
// the "蘁淰" every 768-value string starts with is the LZMA2 chunk header of 1536 bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace voxd::chattts {

// The `dim` float32 values of a spk_emb string (surrounding ASCII whitespace ignored). Throws
// voxd::InputError "spk_emb: not a ChatTTS speaker string (...)" for text that is not base16384, a
// stream that is not LZMA2 or does not end where the text does, a decoded length other than 2·dim
// bytes, and non-finite values. Decompression stops past 2·dim bytes, so hostile input costs at
// most that much memory plus the input's size.
std::vector<float> decode_speaker(std::string_view spk_emb, int64_t dim);

// The spk_emb string of `values`, made as Speaker._encode makes it (float16 with round to
// nearest even, LZMA2 at preset 9 | extreme, base16384); liblzma's encoder at that preset
// reserves about 700 MiB of address space for the call, as the original's does. Throws
// voxd::InputError for an empty input and for a value that is not finite or beyond float16's
// range.
std::string encode_speaker(std::span<const float> values);

// The base16384 text (UTF-8) of `bytes`, as pybase16384.encode_to_string writes it.
std::string base16384_encode(std::span<const uint8_t> bytes);

// The bytes of base16384 text (UTF-8), as pybase16384.decode_from_string reads text it wrote (a
// leading U+FEFF skipped, as there). Throws voxd::InputError "base16384: ..." for invalid UTF-8,
// a character outside the alphabet, or a character count that does not fit the tail marker (or
// its absence), where pybase16384 would return bytes of no meaning.
std::vector<uint8_t> base16384_decode(std::string_view text);

}  // namespace voxd::chattts
