// Helpers shared by the host backends (reference and cpu): the generic strided copy with dtype
// conversion, and the scalar rules both backends must agree on (how ids are read, how bucketize
// picks a bucket, where a paged cache keeps a position). Argument checks are core/ops.h's, not
// these.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/token_sampling.h"

namespace voxd::host {

// dst (contiguous, host) = src (host, any strides), converting element types.
void strided_copy(const Tensor& src, Tensor& dst);
// Every element of dst (host, contiguous, any dtype) = value converted to dst's dtype.
void fill(Tensor& dst, float value);
// Element i of a contiguous host I32 or I64 tensor.
int64_t load_id(const Tensor& ids, int64_t i);
// Throws the voxd::Error of an embedding id outside the table's `vocab` rows.
[[noreturn]] void throw_bad_id(int64_t id, int64_t position, int64_t vocab);
// Index of the first boundary >= value among n ascending boundaries (torch.bucketize with
// right=False; NaN goes to n, as in PyTorch).
int64_t bucket_index(float value, const float* boundaries, int64_t n);
// Bytes of one row of cache [B, Tmax, ...]: the product of the trailing sizes times the dtype.
size_t row_bytes(const Tensor& cache);
// The page row (page · S + slot) of sequence b's position p through page_table [B, P] (host
// I64) over `pages` pages of `page_size` positions, or -1 where the page is missing (an entry
// outside [0, pages), or p past the table).
int64_t page_row(const Tensor& page_table, int64_t b, int64_t p, int64_t page_size, int64_t pages);
// Backend::write_pages on the host: each row of rows [B, T, ...] copied to its page row.
void write_pages(Tensor& pages, const Tensor& rows, const Tensor& page_table,
                 const Tensor& positions);
// One head's row of `dim` = 2·half floats rotated as the reference's rope (rotate_half, the angle
// position · inv_freq[j] formed in F32, its cos and sin and the products in double) into `out`.
void rotate_half(const float* in, float* out, int64_t half, int64_t position,
                 const std::vector<float>& inv_freq);
// Backend::add_rms_norm's sum on the host (F32): sum = x + delta elementwise.
void add(const Tensor& x, const Tensor& delta, Tensor& sum);
// Backend::swiglu on the host (F32): silu of the gate columns, rounded, times the up columns.
void swiglu(const Tensor& gate_up, Tensor& out);
// Backend::qkv_to_pages on the host (F32): rope as the reference computes it (cos and sin in
// double of the F32 angle), the keys and values into their page rows.
void qkv_to_pages(const Tensor& qkv, Tensor& k_pages, Tensor& v_pages, const Tensor& page_table,
                  const Tensor& positions, float theta, Tensor& q_out);
// Backend::sample_tokens's token of row r: sample_token over logits row r and history row r.
int64_t sample_row(const Tensor& logits, const Tensor& history, const TokenDraw& draw, int64_t r);

}  // namespace voxd::host
