#include "families/chattts/speaker_code.h"

#include <lzma.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/dtype.h"
#include "core/error.h"
#include "families/chattts/utf8.h"

namespace voxd::chattts {
namespace {

// base16384's alphabet: 14 bits per character, offset from U+4E00.
constexpr char32_t kAlphabetFirst = 0x4E00;
constexpr char32_t kAlphabetLast = 0x8DFF;
// The tail marker: U+3D00 + the number of bytes (1..6) in the last, partial group.
constexpr char32_t kMarkerBase = 0x3D00;

// Characters holding a tail of `bytes` bytes (1..6): ⌈8·bytes / 14⌉.
constexpr size_t tail_chars(size_t bytes) {
  return (8 * bytes + 13) / 14;
}

std::string hex_code_point(char32_t c) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out = "U+";
  const int digits = c > 0xFFFF ? 6 : 4;
  for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4) out += kHex[(c >> shift) & 15];
  return out;
}

// The bytes of base16384 `text`, or in *why the reason it is not base16384; InputError "<what>
// is not valid UTF-8 ..." for invalid UTF-8.
std::vector<uint8_t> decode_base16384(std::string_view text, std::string_view what,
                                      std::string* why) {
  const std::u32string chars = decode_utf8(text, what);
  const size_t first = !chars.empty() && chars.front() == 0xFEFF ? 1 : 0;
  size_t count = chars.size() - first;
  size_t tail = 0;
  if (count > 0 && chars.back() > kMarkerBase && chars.back() <= kMarkerBase + 6) {
    tail = chars.back() - kMarkerBase;
    --count;
  }
  for (size_t i = first; i < first + count; ++i) {
    if (chars[i] < kAlphabetFirst || chars[i] > kAlphabetLast) {
      *why = "character " + std::to_string(i - first + 1) + " is " + hex_code_point(chars[i]) +
             ", outside base16384's U+4E00..U+8DFF";
      return {};
    }
  }
  const size_t full_chars = count - std::min(count, tail > 0 ? tail_chars(tail) : 0);
  if (full_chars % 4 != 0 || (tail > 0 && count < tail_chars(tail))) {
    *why = std::to_string(count) + " characters" +
           (tail > 0 ? " before a tail marker for " + std::to_string(tail) + " bytes"
                     : " and no tail marker") +
           ", which base16384 never writes";
    return {};
  }
  const size_t length = full_chars / 4 * 7 + tail;
  std::vector<uint8_t> out;
  out.reserve(length);
  uint32_t bits = 0;
  int held = 0;
  for (size_t i = first; i < first + count; ++i) {
    bits = (bits << 14) | (chars[i] - kAlphabetFirst);
    held += 14;
    while (held >= 8 && out.size() < length) {
      held -= 8;
      out.push_back(static_cast<uint8_t>(bits >> held));
    }
    bits &= (1u << held) - 1;
  }
  return out;
}

[[noreturn]] void not_a_speaker(const std::string& why) {
  throw InputError("spk_emb: not a ChatTTS speaker string (" + why + ")");
}

// The LZMA2 filter of Speaker._encode/_decode: preset 9 | extreme; a decoder's dictionary is cut
// to `dict_size` when given (the stream does not record it, and no output past that is kept).
lzma_options_lzma lzma2_options(std::optional<uint32_t> dict_size) {
  lzma_options_lzma options;
  if (lzma_lzma_preset(&options, 9 | LZMA_PRESET_EXTREME)) {
    throw Error("liblzma does not know preset 9 | extreme");
  }
  if (dict_size) options.dict_size = std::max<uint32_t>(*dict_size, LZMA_DICT_SIZE_MIN);
  return options;
}

// Decompresses the raw LZMA2 stream `packed` into at most `limit` bytes.
std::vector<uint8_t> unpack(const std::vector<uint8_t>& packed, size_t limit) {
  lzma_options_lzma options = lzma2_options(static_cast<uint32_t>(limit + 1));
  const lzma_filter filters[] = {{LZMA_FILTER_LZMA2, &options}, {LZMA_VLI_UNKNOWN, nullptr}};
  lzma_stream stream = LZMA_STREAM_INIT;
  if (lzma_raw_decoder(&stream, filters) != LZMA_OK) throw Error("liblzma: no LZMA2 decoder");
  std::vector<uint8_t> out(limit + 1);
  stream.next_in = packed.data();
  stream.avail_in = packed.size();
  stream.next_out = out.data();
  stream.avail_out = out.size();
  lzma_ret ret = LZMA_OK;
  while (ret == LZMA_OK && stream.avail_out > 0) ret = lzma_code(&stream, LZMA_FINISH);
  const size_t produced = out.size() - stream.avail_out;
  const size_t left_in = stream.avail_in;
  lzma_end(&stream);
  if (ret == LZMA_MEM_ERROR) throw Error("liblzma: out of memory decoding a speaker string");
  if (produced > limit) {
    not_a_speaker("it decompresses to more than " + std::to_string(limit) + " bytes");
  }
  if (ret == LZMA_BUF_ERROR) not_a_speaker("its compressed data is cut short");
  if (ret != LZMA_STREAM_END) not_a_speaker("its bytes are not an LZMA2 stream");
  if (left_in > 0) {
    not_a_speaker(std::to_string(left_in) + " bytes follow the end of its compressed data");
  }
  out.resize(produced);
  return out;
}

}  // namespace

std::vector<uint8_t> base16384_decode(std::string_view text) {
  std::string why;
  std::vector<uint8_t> out = decode_base16384(text, "base16384: the text", &why);
  if (!why.empty()) throw InputError("base16384: " + why);
  return out;
}

std::string base16384_encode(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve(bytes.size() / 7 * 12 + 15);
  uint32_t bits = 0;
  int held = 0;
  for (const uint8_t byte : bytes) {
    bits = (bits << 8) | byte;
    held += 8;
    if (held >= 14) {
      held -= 14;
      append_utf8(out, kAlphabetFirst + ((bits >> held) & 0x3FFF));
      bits &= (1u << held) - 1;
    }
  }
  if (held > 0) append_utf8(out, kAlphabetFirst + ((bits << (14 - held)) & 0x3FFF));
  if (bytes.size() % 7 != 0) {
    append_utf8(out, kMarkerBase + static_cast<char32_t>(bytes.size() % 7));
  }
  return out;
}

std::vector<float> decode_speaker(std::string_view spk_emb, int64_t dim) {
  VOXD_CHECK(dim > 0 && dim <= (int64_t{1} << 24), "speaker dimension out of range");
  const size_t begin = spk_emb.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) not_a_speaker("it is empty");
  spk_emb = spk_emb.substr(begin, spk_emb.find_last_not_of(" \t\r\n") + 1 - begin);
  // dim values are 2·dim bytes, at most that much compressed (plus a few bytes), and 12 bytes of
  // UTF-8 per 7 of those: refusing far longer strings bounds the memory decoding takes.
  const size_t typical = static_cast<size_t>(dim) * 24 / 7 + 16;
  if (spk_emb.size() > 16 * typical) {
    not_a_speaker("it is " + std::to_string(spk_emb.size()) + " bytes long; one of " +
                  std::to_string(dim) + " values takes about " + std::to_string(typical));
  }
  std::string why;
  std::vector<uint8_t> packed;
  try {
    packed = decode_base16384(spk_emb, "it", &why);
  } catch (const InputError& e) {
    not_a_speaker(e.what());
  }
  if (!why.empty()) not_a_speaker(why);
  const size_t want = static_cast<size_t>(dim) * 2;
  const std::vector<uint8_t> raw = unpack(packed, want);
  if (raw.size() != want) {
    not_a_speaker("it holds " + std::to_string(raw.size()) + " bytes, not the " +
                  std::to_string(want) + " of " + std::to_string(dim) + " float16 values");
  }
  std::vector<float> values(static_cast<size_t>(dim));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = half_to_float(static_cast<uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8)));
    if (!std::isfinite(values[i])) {
      not_a_speaker("value " + std::to_string(i) + " is " +
                    (std::isnan(values[i]) ? "NaN" : "infinite"));
    }
  }
  return values;
}

std::string encode_speaker(std::span<const float> values) {
  if (values.empty()) throw InputError("spk_emb: no values to encode");
  std::vector<uint8_t> raw(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t half = float_to_half(values[i]);
    if (!std::isfinite(values[i]) || (half & 0x7C00u) == 0x7C00u) {
      throw InputError("spk_emb: value " + std::to_string(i) + " (" + std::to_string(values[i]) +
                       ") is not a finite float16");
    }
    raw[2 * i] = static_cast<uint8_t>(half & 0xFF);
    raw[2 * i + 1] = static_cast<uint8_t>(half >> 8);
  }
  lzma_options_lzma options = lzma2_options(std::nullopt);
  const lzma_filter filters[] = {{LZMA_FILTER_LZMA2, &options}, {LZMA_VLI_UNKNOWN, nullptr}};
  // LZMA2 never grows data by more than 3 bytes per 64 KiB chunk and its end marker.
  std::vector<uint8_t> packed(raw.size() + raw.size() / 16 + 64);
  size_t packed_size = 0;
  const lzma_ret ret = lzma_raw_buffer_encode(filters, nullptr, raw.data(), raw.size(),
                                              packed.data(), &packed_size, packed.size());
  if (ret != LZMA_OK)
    throw Error("liblzma failed to compress a speaker (code " +
                std::to_string(static_cast<int>(ret)) + ")");
  packed.resize(packed_size);
  return base16384_encode(packed);
}

}  // namespace voxd::chattts
