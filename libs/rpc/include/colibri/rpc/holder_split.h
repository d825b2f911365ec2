// How one block is read from several stores holding it at once, so that it lands soonest.
//
// Holder i can start on the block once it has delivered `queued` bytes already asked of it,
// and then delivers `rate` bytes/s. Water-filling: every holder used finishes at the same
// time T, holder i taking rate_i * T - queued_i bytes (a holder busy past T takes none). A
// part smaller than `min_part` is not worth its request: the holder with the smallest share
// drops out until every part is at least that big (a small block ends with one holder: the
// caller then picks the holder for the whole block). Cuts fall on multiples of `align` (parts stay page
// aligned for the store's reads).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace colibri::rpc {

struct HolderLoad {
  double queued_bytes = 0;
  double rate = 0;  // bytes/s, > 0
};

// One byte count per holder (0: not used), summing to `size`; all zero when no holder has a
// positive rate.
std::vector<uint64_t> SplitAcrossHolders(std::span<const HolderLoad> holders, uint64_t size,
                                         uint64_t min_part, uint64_t align);

}  // namespace colibri::rpc
