#pragma once
/// The probe's parent <-> worker protocol: one binary frame per message (SOCK_SEQPACKET keeps the boundaries).
/// A frame is a 16-byte header {magic "PLPB", version, type, payload length, FNV-1a checksum of the payload}
/// followed by the payload; decode() rejects anything else (wrong magic, version, type, length or checksum,
/// truncated or trailing bytes, counts out of range) with a one-line reason.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reference/core/status.h"
#include "reference/probe/backend.h"
#include "reference/probe/probe.h"

namespace peerlab::probe {

inline constexpr uint32_t kProtocolMagic = 0x42504C50;  // "PLPB" little endian
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr size_t kMaxFrameBytes = 64 * 1024;
inline constexpr int kMaxGpus = 64;
inline constexpr size_t kMaxCellsPerBatch = 1024;

enum class MessageType : uint16_t {
  kInventory = 1,  ///< worker -> parent, first message
  kSetup = 2,      ///< parent -> worker
  kReady = 3,      ///< worker -> parent, answer to setup and import (owner: VMM fds attached)
  kImport = 4,     ///< parent -> importer (VMM fds attached)
  kRun = 5,        ///< parent -> worker: a batch of cells
  kCellDone = 6,   ///< worker -> parent: one cell's result
  kBatchDone = 7,  ///< worker -> parent: end of a batch; a non-empty text means the worker is exiting
  kFatal = 8,      ///< worker -> parent: the worker cannot go on (bad request)
  kQuit = 9,       ///< parent -> worker
};
std::string_view messageTypeName(MessageType t);

/// End of a batch: `fatal` non-empty when the worker is about to exit (sticky error, own deadline).
struct BatchDone {
  std::string fatal;
};
struct Fatal {
  std::string reason;
};
struct Quit {};

std::vector<uint8_t> encode(const Inventory& inv);
std::vector<uint8_t> encode(const SetupRequest& req);
std::vector<uint8_t> encode(const ReadyReport& ready);
std::vector<uint8_t> encode(const Exports& exports);  ///< an import request
std::vector<uint8_t> encode(const RunRequest& req);
std::vector<uint8_t> encode(const CellResult& result);
std::vector<uint8_t> encode(const BatchDone& done);
std::vector<uint8_t> encode(const Fatal& fatal);
std::vector<uint8_t> encode(const Quit& quit);

/// A decoded message: `type` says which member holds it.
struct Decoded {
  MessageType type = MessageType::kQuit;
  Inventory inventory;   ///< kInventory
  SetupRequest setup;    ///< kSetup
  ReadyReport ready;     ///< kReady
  Exports exports;       ///< kImport
  RunRequest run;        ///< kRun
  CellResult cell;       ///< kCellDone
  BatchDone batch_done;  ///< kBatchDone
  Fatal fatal;           ///< kFatal
};

/// Decodes one frame; `invalid_argument` naming what is wrong for anything that is not a valid message.
StatusOr<Decoded> decode(std::span<const uint8_t> frame);

/// 32-bit FNV-1a.
uint32_t fnv1a32(std::span<const uint8_t> bytes);

}  // namespace peerlab::probe
