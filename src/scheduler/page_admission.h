// How a kind whose items take pages of their voice's KV pool (a prefill) fills a batch: in slack
// order, as long as the pages are free, so that a long item is not starved by short ones.
#pragma once

#include <cstdint>
#include <vector>

#include "core/kv_pages.h"
#include "scheduler/step_kind.h"

namespace voxd::scheduler {

// The batch `lead` leads (batch_led_by) from `candidates` (least slack first): its voice's items
// in order while `free` pages of `pool` cover `pages_needed(candidate)`; after the first that must
// wait, no other item that needs pages is taken. An item that needs no more pages (it holds them:
// a prefill in pieces) never waits, wherever it stands, so that pages held mid-prefill are never
// held up behind items waiting for pages. An item that `never_fits(candidate)` is proposed alone,
// for run() to refuse, or ends the batch; without a pool (the voice not loaded yet), the lead
// alone, for run() to see its pool. Empty when every item waits for pages.
template <typename Candidate, typename PagesNeeded, typename NeverFits>
Batch batch_within_free_pages(const std::vector<Candidate>& candidates, const Candidate& lead,
                              const KvPagePool* pool, int64_t free, const Pacing& pacing,
                              Clock::time_point now, PagesNeeded pages_needed,
                              NeverFits never_fits) {
  Batch batch = batch_led_by(lead, pacing, now);
  bool waiting = false;  // an item waits for pages: those after it that need any wait too
  for (const Candidate& c : candidates) {
    if (static_cast<int64_t>(batch.items.size()) >= pacing.max_batch) break;
    if (c.stream->voice != batch.voice) continue;
    if (pool == nullptr) {
      batch.items.push_back(c.stream);
      break;
    }
    const int64_t need = pages_needed(c);
    if (need > 0 && never_fits(c)) {
      if (waiting) continue;
      if (batch.items.empty()) batch.items.push_back(c.stream);
      break;
    }
    if (need > 0 && (waiting || need > free)) {
      waiting = true;
      continue;
    }
    free -= need;
    batch.items.push_back(c.stream);
  }
  return batch;
}

}  // namespace voxd::scheduler
