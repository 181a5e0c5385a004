#pragma once
/// NVML loaded at run time: dlopen("libnvidia-ml.so.1") (or $PEERLAB_NVML_LIBRARY) and dlsym of each entry point, so
/// peerlab builds and runs without NVML. Every entry point is optional: a missing one is a null pointer here, and
/// callers report the check that needs it as unsupported.
///
/// The types below are written from the public NVML API reference (docs.nvidia.com/deploy/nvml-api), limited to what
/// peerlab reads; they are layout-compatible with the driver's library.

#include <memory>
#include <string>

#include "reference/core/status.h"

namespace peerlab::health::nvml {

// Return codes (nvmlReturn_t).
using Return = int;
inline constexpr Return kSuccess = 0;
inline constexpr Return kErrorUninitialized = 1;
inline constexpr Return kErrorInvalidArgument = 2;
inline constexpr Return kErrorNotSupported = 3;
inline constexpr Return kErrorNoPermission = 4;
inline constexpr Return kErrorNotFound = 6;
inline constexpr Return kErrorInsufficientSize = 7;
inline constexpr Return kErrorDriverNotLoaded = 9;
inline constexpr Return kErrorTimeout = 10;
inline constexpr Return kErrorFunctionNotFound = 13;
inline constexpr Return kErrorGpuIsLost = 15;
inline constexpr Return kErrorUnknown = 999;

using Device = struct DeviceOpaque*;
using EventSet = struct EventSetOpaque*;

/// nvmlPciInfo_t (the _v3 query's layout).
struct PciInfo {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};

// nvmlEnableState_t
inline constexpr int kFeatureDisabled = 0;
inline constexpr int kFeatureEnabled = 1;

// nvmlValueType_t
inline constexpr int kValueDouble = 0;
inline constexpr int kValueUnsignedInt = 1;
inline constexpr int kValueUnsignedLong = 2;
inline constexpr int kValueUnsignedLongLong = 3;
inline constexpr int kValueSignedLongLong = 4;
inline constexpr int kValueSignedInt = 5;

union Value {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  int siVal;
};

/// nvmlFieldValue_t
struct FieldValue {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  Return nvmlReturn;
  Value value;
};

// Field ids (NVML_FI_DEV_*).
inline constexpr unsigned kFieldNvlinkSpeedCommon = 90;
inline constexpr unsigned kFieldNvlinkGetSpeed = 164;
inline constexpr unsigned kFieldPcieCorrectableErrors = 173;

// nvmlIntNvLinkDeviceType_t
inline constexpr int kNvlinkDeviceGpu = 0;
inline constexpr int kNvlinkDeviceIbmNpu = 1;
inline constexpr int kNvlinkDeviceSwitch = 2;
inline constexpr int kNvlinkDeviceUnknown = 0xff;
inline constexpr unsigned kNvlinkMaxLinks = 18;

// nvmlNvlinkVersion_t: INVALID = 0, 1_0 = 1, 2_0 = 2, 2_2 = 3, 3_0 = 4, 3_1 = 5, 4_0 = 6 (Hopper), 5_0 = 7 (Blackwell),
// 6_0 = 8. An H200 reports 6: NVLink 4.
inline constexpr unsigned kNvlinkVersion4_0 = 6;
/// The NVLink generation (1..6) of an nvmlDeviceGetNvLinkVersion value; 0 for INVALID or a value this build does not
/// know.
constexpr int nvlinkGeneration(unsigned version_enum) {
  switch (version_enum) {
    case 1:
      return 1;
    case 2:
    case 3:
      return 2;
    case 4:
    case 5:
      return 3;
    case 6:
      return 4;
    case 7:
      return 5;
    case 8:
      return 6;
    default:
      return 0;
  }
}

// nvmlNvLinkErrorCounter_t
inline constexpr int kNvlinkErrorDlReplay = 0;
inline constexpr int kNvlinkErrorDlRecovery = 1;
inline constexpr int kNvlinkErrorDlCrcFlit = 2;
inline constexpr int kNvlinkErrorDlCrcData = 3;

// nvmlMemoryErrorType_t, nvmlEccCounterType_t, nvmlMemoryLocation_t
inline constexpr int kMemoryErrorCorrected = 0;
inline constexpr int kMemoryErrorUncorrected = 1;
inline constexpr int kVolatileEcc = 0;
inline constexpr int kAggregateEcc = 1;
inline constexpr int kLocationDram = 2;
inline constexpr int kLocationSram = 7;

/// nvmlEccSramErrorStatus_v1_t
struct EccSramErrorStatus {
  unsigned int version;
  unsigned long long aggregateUncParity;
  unsigned long long aggregateUncSecDed;
  unsigned long long aggregateCor;
  unsigned long long volatileUncParity;
  unsigned long long volatileUncSecDed;
  unsigned long long volatileCor;
  unsigned long long aggregateUncBucketL2;
  unsigned long long aggregateUncBucketSm;
  unsigned long long aggregateUncBucketPcie;
  unsigned long long aggregateUncBucketMcu;
  unsigned long long aggregateUncBucketOther;
  unsigned int bThresholdExceeded;
};
inline constexpr unsigned kEccSramErrorStatusV1 = static_cast<unsigned>(sizeof(EccSramErrorStatus)) | (1u << 24);

// nvmlPageRetirementCause_t
inline constexpr int kRetiredMultipleSingleBit = 0;
inline constexpr int kRetiredDoubleBit = 1;

/// nvmlRowRemapperHistogramValues_t: banks by how many spare rows they have left.
struct RowRemapperHistogram {
  unsigned int max;
  unsigned int high;
  unsigned int partial;
  unsigned int low;
  unsigned int none;
};

/// nvmlGpuFabricInfo_v2_t
struct GpuFabricInfo {
  unsigned int version;
  unsigned char clusterUuid[16];
  Return status;
  unsigned int cliqueId;
  unsigned char state;
  unsigned int healthMask;
};
inline constexpr unsigned kGpuFabricInfoV2 = static_cast<unsigned>(sizeof(GpuFabricInfo)) | (2u << 24);
inline constexpr unsigned char kFabricNotSupported = 0;
inline constexpr unsigned char kFabricNotStarted = 1;
inline constexpr unsigned char kFabricInProgress = 2;
inline constexpr unsigned char kFabricCompleted = 3;
// Fabric health mask: 2-bit fields, value 1 = true.
inline constexpr unsigned kFabricHealthDegradedBwShift = 0;
inline constexpr unsigned kFabricHealthRouteRecoveryShift = 2;
inline constexpr unsigned kFabricHealthRouteUnhealthyShift = 4;
inline constexpr unsigned kFabricHealthAccessTimeoutShift = 6;

/// nvmlEventData_t
struct EventData {
  Device device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
inline constexpr unsigned long long kEventXidCriticalError = 0x8;

// Clock event (throttle) reason bits.
inline constexpr unsigned long long kClockGpuIdle = 0x1;
inline constexpr unsigned long long kClockSwPowerCap = 0x4;
inline constexpr unsigned long long kClockHwSlowdown = 0x8;
inline constexpr unsigned long long kClockSwThermal = 0x20;
inline constexpr unsigned long long kClockHwThermal = 0x40;
inline constexpr unsigned long long kClockHwPowerBrake = 0x80;

static_assert(sizeof(PciInfo) == 68);
static_assert(sizeof(FieldValue) == 40);
static_assert(sizeof(GpuFabricInfo) == 36);
static_assert(sizeof(EccSramErrorStatus) == 104);

// Every entry point peerlab uses, as X(name, return, parameters).
#define PEERLAB_NVML_FUNCTIONS(X)                                                                                     \
  X(nvmlInit_v2, (void))                                                                                              \
  X(nvmlShutdown, (void))                                                                                             \
  X(nvmlSystemGetDriverVersion, (char* version, unsigned int length))                                                 \
  X(nvmlDeviceGetCount_v2, (unsigned int* count))                                                                     \
  X(nvmlDeviceGetHandleByIndex_v2, (unsigned int index, Device* device))                                              \
  X(nvmlDeviceGetHandleByPciBusId_v2, (const char* bus_id, Device* device))                                           \
  X(nvmlDeviceGetPciInfo_v3, (Device device, PciInfo * pci))                                                          \
  X(nvmlDeviceGetName, (Device device, char* name, unsigned int length))                                              \
  X(nvmlDeviceGetUUID, (Device device, char* uuid, unsigned int length))                                              \
  X(nvmlDeviceGetMinorNumber, (Device device, unsigned int* minor))                                                   \
  X(nvmlDeviceGetFieldValues, (Device device, int count, FieldValue* values))                                         \
  X(nvmlDeviceGetCurrPcieLinkGeneration, (Device device, unsigned int* gen))                                          \
  X(nvmlDeviceGetCurrPcieLinkWidth, (Device device, unsigned int* width))                                             \
  X(nvmlDeviceGetMaxPcieLinkGeneration, (Device device, unsigned int* gen))                                           \
  X(nvmlDeviceGetMaxPcieLinkWidth, (Device device, unsigned int* width))                                              \
  X(nvmlDeviceGetGpuMaxPcieLinkGeneration, (Device device, unsigned int* gen))                                        \
  X(nvmlDeviceGetPcieReplayCounter, (Device device, unsigned int* value))                                             \
  X(nvmlDeviceGetNvLinkState, (Device device, unsigned int link, int* active))                                        \
  X(nvmlDeviceGetNvLinkVersion, (Device device, unsigned int link, unsigned int* version))                            \
  X(nvmlDeviceGetNvLinkRemoteDeviceType, (Device device, unsigned int link, int* type))                               \
  X(nvmlDeviceGetNvLinkRemotePciInfo_v2, (Device device, unsigned int link, PciInfo* pci))                            \
  X(nvmlDeviceGetNvLinkErrorCounter, (Device device, unsigned int link, int counter, unsigned long long* value))      \
  X(nvmlDeviceGetGpuFabricInfoV, (Device device, GpuFabricInfo * info))                                               \
  X(nvmlDeviceGetEccMode, (Device device, int* current, int* pending))                                                \
  X(nvmlDeviceGetTotalEccErrors, (Device device, int type, int counter, unsigned long long* count))                   \
  X(nvmlDeviceGetMemoryErrorCounter, (Device device, int type, int counter, int location, unsigned long long* count)) \
  X(nvmlDeviceGetSramEccErrorStatus, (Device device, EccSramErrorStatus * status))                                    \
  X(nvmlDeviceGetRetiredPages, (Device device, int cause, unsigned int* count, unsigned long long* addresses))        \
  X(nvmlDeviceGetRetiredPagesPendingStatus, (Device device, int* pending))                                            \
  X(nvmlDeviceGetRemappedRows,                                                                                        \
    (Device device, unsigned int* corrected, unsigned int* uncorrected, unsigned int* pending, unsigned int* failed)) \
  X(nvmlDeviceGetRowRemapperHistogram, (Device device, RowRemapperHistogram * values))                                \
  X(nvmlDeviceGetCurrentClocksEventReasons, (Device device, unsigned long long* reasons))                             \
  X(nvmlDeviceGetCurrentClocksThrottleReasons, (Device device, unsigned long long* reasons))                          \
  X(nvmlEventSetCreate, (EventSet * set))                                                                             \
  X(nvmlDeviceRegisterEvents, (Device device, unsigned long long types, EventSet set))                                \
  X(nvmlEventSetWait_v2, (EventSet set, EventData * data, unsigned int timeout_ms))                                   \
  X(nvmlEventSetFree, (EventSet set))

/// The loaded library: one pointer per entry point, null where the library lacks it.
class Library {
 public:
  /// dlopens $PEERLAB_NVML_LIBRARY (else libnvidia-ml.so.1) and calls nvmlInit_v2. `unavailable` says why not (no
  /// library, no nvmlInit_v2, init failed: no driver / no GPU).
  static StatusOr<std::shared_ptr<Library>> open();
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  /// The path that was opened.
  const std::string& path() const { return path_; }
  /// nvmlErrorString when the library has it, else "NVML error <r>".
  std::string errorString(Return r) const;

#define PEERLAB_NVML_POINTER(name, params) Return(*name) params = nullptr;
  PEERLAB_NVML_FUNCTIONS(PEERLAB_NVML_POINTER)
#undef PEERLAB_NVML_POINTER

 private:
  Library() = default;
  void* handle_ = nullptr;
  const char* (*error_string_)(Return) = nullptr;
  std::string path_;
};

/// "a.b.c" bus id of NVML's PCI info in peerlab's form ("0000:1b:00.0").
std::string busIdOf(const PciInfo& pci);

/// A field value as a double; nullopt when the field did not answer.
bool fieldAsDouble(const FieldValue& v, double* out);

}  // namespace peerlab::health::nvml
