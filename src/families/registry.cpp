#include "families/registry.h"

#include <memory>

#include "families/chattts/family.h"
#include "families/fastspeech2/family.h"
#include "families/sambert/family.h"

namespace voxd::families {

const scheduler::FamilyRegistry& registry() {
  static const scheduler::FamilyRegistry families = [] {
    scheduler::FamilyRegistry made;
    made.add(std::make_unique<fastspeech2::Family>());
    made.add(std::make_unique<chattts::Family>());
    made.add(std::make_unique<sambert::Family>());
    return made;
  }();
  return families;
}

}  // namespace voxd::families
