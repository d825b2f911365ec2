// Block checksums: XXH3-64 over the bytes. Used for expert blocks, dense tensors and stream chunks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace colibri {

uint64_t Checksum64(const void* data, size_t size);

// 16 lowercase hex digits, as stored in manifests.
std::string ChecksumHex(uint64_t checksum);

// Parses ChecksumHex output; returns false on malformed text.
bool ParseChecksumHex(const std::string& text, uint64_t* out);

}  // namespace colibri
