// CRC-32C (Castagnoli), the checksum safetensors files written by remat carry per tensor: it
// detects every single-bit flip and every burst of up to 32 flipped bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace remat {

// CRC-32C of `size` bytes at `data` (the iSCSI / ext4 polynomial 0x1EDC6F41, reflected, with
// the usual initial value and final xor). crc32c("123456789") == 0xE3069283. Uses the SSE 4.2
// instruction when the CPU has it (several GB/s), a table otherwise.
uint32_t crc32c(const void* data, size_t size);

}  // namespace remat
