// The transports without a GPU: the capability check's judgement, the loaders and the error paths against stand-in
// libraries, and real two-process transfers of host memory through UCX and NIXL where they are installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "reference/core/pattern.h"
#include "reference/testing/guards.h"
#include "reference/testing/rank_test.h"
#include "reference/transport/nixl_api.h"
#include "reference/transport/transport.h"
#include "reference/transport/ucx_api.h"

#ifdef PEERLAB_HAVE_UCX_HEADERS
#include <ucp/api/ucp.h>
#endif

namespace peerlab::transport {
namespace {

using testing::runTestAsRanks;

CapabilityReport ucxReport(uint64_t context, std::vector<int> regions) {
  CapabilityReport r;
  r.library = Library::kUcx;
  r.context_known = true;
  r.context_types = context;
  r.region_types = std::move(regions);
  r.has_device_regions = true;
  return r;
}

constexpr uint64_t kHost = 1ull << ucx::kMemoryHost;
constexpr uint64_t kCuda = 1ull << ucx::kMemoryCuda;

TEST(Capability, UcxWithCudaAndCudaRegistrationsPasses) {
  EXPECT_TRUE(judgeCapability(ucxReport(kHost | kCuda, {ucx::kMemoryCuda, ucx::kMemoryCuda})).isOk());
}

TEST(Capability, UcxWithoutCudaIsUnsupportedWithTheReason) {
  const Status st = judgeCapability(ucxReport(kHost, {ucx::kMemoryHost}));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find(kUcxNoCudaReason), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("context memory types: host;"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("registered as host"), std::string::npos) << st.message();
}

TEST(Capability, CudaContextButHostRegistrationIsUnsupported) {
  // The context claims CUDA, yet one GPU buffer registered as host memory: still the trap.
  const Status st = judgeCapability(ucxReport(kHost | kCuda, {ucx::kMemoryCuda, ucx::kMemoryHost}));
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find(kUcxNoCudaReason), std::string::npos);
  EXPECT_NE(st.message().find("cuda, host"), std::string::npos) << st.message();
}

TEST(Capability, UnknownContextTypesAreNotTakenAsSupport) {
  CapabilityReport r = ucxReport(0, {ucx::kMemoryCuda});
  r.context_known = false;
  EXPECT_EQ(judgeCapability(r).code(), StatusCode::kUnavailable);
}

TEST(Capability, HostRegionsNeedNoCuda) {
  CapabilityReport r = ucxReport(kHost, {});
  r.has_device_regions = false;
  EXPECT_TRUE(judgeCapability(r).isOk());
}

TEST(Capability, NixlFailuresNameTheStep) {
  CapabilityReport r;
  r.library = Library::kNixl;
  r.has_device_regions = true;
  EXPECT_TRUE(judgeCapability(r).isOk());
  r.register_status = -2;
  Status st = judgeCapability(r);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("registering GPU memory (VRAM) failed: NIXL_CAPI_ERROR_BACKEND (-2)"), std::string::npos)
      << st.message();
  r.register_status = 0;
  r.prepare_status = -6;
  EXPECT_NE(judgeCapability(r).message().find("descriptor list"), std::string::npos);
  r.backend_lists_vram = false;
  EXPECT_NE(judgeCapability(r).message().find("does not list VRAM"), std::string::npos);
  r.backend_status = -2;
  EXPECT_NE(judgeCapability(r).message().find("UCX backend could not be created"), std::string::npos);
}

TEST(Capability, MemoryTypesText) {
  EXPECT_EQ(memoryTypesText(kHost | kCuda | (1ull << 2)), "host, cuda, cuda-managed");
  EXPECT_EQ(memoryTypesText(0), "none");
  EXPECT_EQ(memoryTypesText(1ull << 9), "type 9");
}

TEST(Names, LibrariesAndWaitModesRoundTrip) {
  for (Library l : {Library::kNixl, Library::kUcx})
    EXPECT_EQ(parseLibrary(libraryName(l)), l);
  for (WaitMode m : {WaitMode::kSpin, WaitMode::kYield, WaitMode::kProgressThread})
    EXPECT_EQ(parseWaitMode(waitModeName(m)), m);
  EXPECT_FALSE(parseLibrary("mpi").has_value());
  EXPECT_FALSE(parseWaitMode("busy").has_value());
}

#ifdef PEERLAB_HAVE_UCX_HEADERS
// peerlab's declarations against the UCX headers of this machine: the fields peerlab sets or reads sit where UCX
// puts them.
TEST(UcxLayout, DeclarationsMatchTheHeaders) {
  EXPECT_EQ(offsetof(ucp_params_t, features), offsetof(ucx::Params, features));
  EXPECT_EQ(offsetof(ucp_context_attr_t, memory_types), offsetof(ucx::ContextAttr, memory_types));
  EXPECT_GE(sizeof(ucx::ContextAttr), sizeof(ucp_context_attr_t));
  EXPECT_EQ(offsetof(ucp_worker_params_t, thread_mode), offsetof(ucx::WorkerParams, thread_mode));
  EXPECT_EQ(offsetof(ucp_ep_params_t, address), offsetof(ucx::EpParams, address));
  EXPECT_EQ(offsetof(ucp_mem_map_params_t, length), offsetof(ucx::MemMapParams, length));
  EXPECT_EQ(offsetof(ucp_mem_map_params_t, memory_type), offsetof(ucx::MemMapParams, memory_type));
  EXPECT_EQ(offsetof(ucp_mem_attr_t, mem_type), offsetof(ucx::MemAttr, mem_type));
  EXPECT_GE(sizeof(ucx::MemAttr), sizeof(ucp_mem_attr_t));
  EXPECT_EQ(offsetof(ucp_request_param_t, flags), offsetof(ucx::RequestParam, flags));
  EXPECT_EQ(offsetof(ucp_request_param_t, memory_type), offsetof(ucx::RequestParam, memory_type));
  EXPECT_EQ(offsetof(ucp_request_param_t, memh), offsetof(ucx::RequestParam, memh));
  EXPECT_EQ(UCP_OP_ATTR_FIELD_MEMORY_TYPE, ucx::kOpFieldMemoryType);
  EXPECT_EQ(UCP_OP_ATTR_FIELD_MEMH, ucx::kOpFieldMemh);
  EXPECT_GE(sizeof(ucx::RequestParam), sizeof(ucp_request_param_t));
  EXPECT_EQ(sizeof(ucs_status_t), sizeof(ucx::StatusT));
  EXPECT_EQ(static_cast<int>(UCS_MEMORY_TYPE_CUDA), ucx::kMemoryCuda);
  EXPECT_EQ(UCP_FEATURE_RMA, ucx::kFeatureRma);
  EXPECT_EQ(UCP_ATTR_FIELD_MEMORY_TYPES, ucx::kAttrFieldMemoryTypes);
  EXPECT_EQ(UCP_MEM_ATTR_FIELD_MEM_TYPE, ucx::kMemAttrFieldMemType);
  EXPECT_EQ(static_cast<int>(UCS_THREAD_MODE_SERIALIZED), ucx::kThreadModeSerialized);
  EXPECT_TRUE(ucx::isErrorPtr(UCS_STATUS_PTR(UCS_ERR_IO_ERROR)));
  EXPECT_FALSE(ucx::isErrorPtr(nullptr));
  EXPECT_EQ(ucx::errorOf(UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED)), ucx::kErrUnsupported);
}
#endif

// ---- the loaders ----

TEST(Locate, EnvironmentNamesTheLibrary) {
  testing::ScopedEnv dir("PEERLAB_UCX_DIR", "/nonexistent/ucx");
  Found f = findLibrary(Library::kUcx);
  EXPECT_FALSE(f.found);
  EXPECT_NE(f.describe(Library::kUcx).find("UCX not found (PEERLAB_UCX_DIR=/nonexistent/ucx)"), std::string::npos);
  testing::ScopedEnv file("PEERLAB_UCX_LIBRARY", PEERLAB_FAKE_UCX_PATH);
  f = findLibrary(Library::kUcx);
  EXPECT_TRUE(f.found);
  EXPECT_EQ(f.path, PEERLAB_FAKE_UCX_PATH);
  EXPECT_FALSE(f.cuda_module) << "the stand-in has no ucx/libuct_cuda.so beside it";
  testing::ScopedEnv nixl("PEERLAB_NIXL_DIR", "/nonexistent/nixl");
  testing::ScopedEnv no_file("PEERLAB_NIXL_LIBRARY", nullptr);
  EXPECT_NE(findLibrary(Library::kNixl).describe(Library::kNixl).find("NIXL not found"), std::string::npos);
}

TEST(Locate, CudaModuleWithoutMemoryHooksTurnsTheMemtypeCacheOff) {
  // A UCX tree with the CUDA transport but not UCM's CUDA hooks: its memory type cache would never hear of a GPU
  // allocation and would answer "host" for every GPU pointer.
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("peerlab-ucx-tree-" + std::to_string(::getpid()));
  fs::create_directories(root / "lib" / "ucx");
  auto cleanup = testing::Finally([&] {
    std::error_code ec;
    fs::remove_all(root, ec);
  });
  auto touch = [](const fs::path& p) { std::ofstream(p).put('\0'); };
  const std::string lib = (root / "lib" / "libucp.so.0").string();
  touch(lib);
  testing::ScopedEnv unset("UCX_MEMTYPE_CACHE", nullptr);
  EXPECT_EQ(ucx::prepareMemoryTypeDetection(lib), "") << "no CUDA transport: nothing to detect";
  EXPECT_EQ(std::getenv("UCX_MEMTYPE_CACHE"), nullptr);
  touch(root / "lib" / "ucx" / "libuct_cuda.so.0");
  EXPECT_TRUE(ucx::ucxHasCudaModule(lib));
  EXPECT_FALSE(ucx::ucxHasCudaHooks(lib));
  EXPECT_NE(ucx::prepareMemoryTypeDetection(lib).find("UCX_MEMTYPE_CACHE=n"), std::string::npos);
  ASSERT_NE(std::getenv("UCX_MEMTYPE_CACHE"), nullptr);
  EXPECT_STREQ(std::getenv("UCX_MEMTYPE_CACHE"), "n");
  {
    // The user's own choice stands.
    testing::ScopedEnv mine("UCX_MEMTYPE_CACHE", "y");
    EXPECT_EQ(ucx::prepareMemoryTypeDetection(lib), "");
    EXPECT_STREQ(std::getenv("UCX_MEMTYPE_CACHE"), "y");
  }
  testing::ScopedEnv unset_again("UCX_MEMTYPE_CACHE", nullptr);
  touch(root / "lib" / "ucx" / "libucm_cuda.so.0");
  EXPECT_TRUE(ucx::ucxHasCudaHooks(lib));
  EXPECT_EQ(ucx::prepareMemoryTypeDetection(lib), "") << "the hooks keep the cache right";
  EXPECT_EQ(std::getenv("UCX_MEMTYPE_CACHE"), nullptr);
}

TEST(Locate, IncompleteLibraryIsRefusedNamingTheMissingEntryPoint) {
  auto lib = ucx::Library::open(PEERLAB_FAKE_UCX_MINIMAL_PATH);
  ASSERT_FALSE(lib.isOk());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(lib.status().message().find("lacks ucp_put_nbx"), std::string::npos) << lib.status().message();
  auto missing = nixl::Library::open("/nonexistent/libnixl_capi.so");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("cannot load /nonexistent/libnixl_capi.so"), std::string::npos);
}

TEST(Locate, StubNixlIsRefused) {
  testing::ScopedEnv s("PEERLAB_FAKE_NIXL", "stub");
  auto lib = nixl::Library::open(PEERLAB_FAKE_NIXL_PATH);
  ASSERT_FALSE(lib.isOk());
  EXPECT_NE(lib.status().message().find("stub C API"), std::string::npos);
}

// ---- two ranks against the stand-ins ----

// Host buffers offered as "device" regions: the stand-ins answer for the memory type, nothing is touched.
std::vector<Region> fakeDeviceRegions(std::vector<uint64_t>& storage) {
  storage.assign(2 * 4096, 0);
  return {{storage.data(), 4096 * 8, MemoryKind::kDevice, 0},
          {storage.data() + 4096, 4096 * 8, MemoryKind::kDevice, 0}};
}

StatusOr<std::unique_ptr<Endpoint>> connectFake(Bootstrap& boot, Library library, std::vector<uint64_t>& storage,
                                                bool progress = false) {
  EndpointOptions o;
  o.library = library;
  o.peer = 1 - boot.rank();
  o.regions = fakeDeviceRegions(storage);
  o.deadline = Deadline::afterMs(20'000);
  o.progress_thread = progress;
  return Endpoint::connect(boot, o);
}

std::vector<std::string> fakeUcxEnv(const std::string& scenario) {
  return {"PEERLAB_UCX_LIBRARY=" PEERLAB_FAKE_UCX_PATH, "PEERLAB_FAKE_UCX=" + scenario};
}
std::vector<std::string> fakeNixlEnv(const std::string& scenario) {
  return {"PEERLAB_NIXL_LIBRARY=" PEERLAB_FAKE_NIXL_PATH, "PEERLAB_FAKE_NIXL=" + scenario};
}

TEST(FakeUcx, NoCudaIsUnsupportedOnBothSides) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, fakeUcxEnv("no_cuda"));
  std::vector<uint64_t> storage;
  auto ep = connectFake(boot, Library::kUcx, storage);
  ASSERT_FALSE(ep.isOk());
  EXPECT_EQ(ep.status().code(), StatusCode::kUnavailable);
  // Both ranks name both sides, each with the reason.
  EXPECT_NE(ep.status().message().find("rank 0: " + std::string(kUcxNoCudaReason)), std::string::npos)
      << ep.status().message();
  EXPECT_NE(ep.status().message().find("rank 1: " + std::string(kUcxNoCudaReason)), std::string::npos);
}

TEST(FakeUcx, HostRegistrationUnderACudaContextIsUnsupported) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, fakeUcxEnv("host_registration"));
  std::vector<uint64_t> storage;
  auto ep = connectFake(boot, Library::kUcx, storage);
  ASSERT_FALSE(ep.isOk());
  EXPECT_NE(ep.status().message().find("context memory types: host, cuda, cuda-managed"), std::string::npos)
      << ep.status().message();
}

TEST(FakeUcx, InitFailureCarriesUcxStatusText) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, fakeUcxEnv("init_error"));
  std::vector<uint64_t> storage;
  auto ep = connectFake(boot, Library::kUcx, storage);
  ASSERT_FALSE(ep.isOk());
  EXPECT_NE(ep.status().message().find("ucp_init: Unsupported operation (-22)"), std::string::npos)
      << ep.status().message();
}

TEST(FakeUcx, TransfersCompleteInEveryWaitMode) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, fakeUcxEnv("cuda"));
  std::vector<uint64_t> storage;
  auto ep = connectFake(boot, Library::kUcx, storage, /*progress=*/true);
  ASSERT_TRUE(ep.isOk()) << ep.status().toString();
  EXPECT_EQ((*ep)->remote().size(), 2u);
  for (WaitMode mode : {WaitMode::kSpin, WaitMode::kYield, WaitMode::kProgressThread}) {
    auto id = (*ep)->prepare({Op::kWrite, 0, 0, 1, 64, 1024, true});
    ASSERT_TRUE(id.isOk()) << id.status().toString();
    auto t = (*ep)->post(*id);
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    EXPECT_TRUE((*ep)->wait(*t, mode, Deadline::afterMs(5000)).isOk()) << waitModeName(mode);
    EXPECT_TRUE((*ep)->release(*id).isOk());
  }
  // A range outside what the peer offered never reaches the library.
  auto bad = (*ep)->prepare({Op::kWrite, 0, 0, 1, 4096 * 8 - 8, 16, false});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*ep)->prepare({Op::kRead, 0, 0, 1, 0, 16, true}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(boot.barrier(Deadline::afterMs(10'000)).isOk());
}

TEST(FakeUcx, ImmediateErrorFailsThePost) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, fakeUcxEnv("put_error"));
  std::vector<uint64_t> storage;
  auto ep = connectFake(boot, Library::kUcx, storage);
  ASSERT_TRUE(ep.isOk()) << ep.status().toString();
  auto id = (*ep)->prepare({Op::kWrite, 0, 0, 0, 0, 64, false});
  ASSERT_TRUE(id.isOk());
  auto t = (*ep)->post(*id);
  ASSERT_FALSE(t.isOk());
  EXPECT_NE(t.status().message().find("ucp_put_nbx: Input/output error (-3)"), std::string::npos)
      << t.status().message();
  EXPECT_TRUE(boot.barrier(Deadline::afterMs(10'000)).isOk());
}

TEST(FakeUcx, StuckTransferTimesOutInEveryWaitMode) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, fakeUcxEnv("never_completes"));
  std::vector<uint64_t> storage;
  auto ep = connectFake(boot, Library::kUcx, storage, /*progress=*/true);
  ASSERT_TRUE(ep.isOk()) << ep.status().toString();
  for (WaitMode mode : {WaitMode::kSpin, WaitMode::kYield, WaitMode::kProgressThread}) {
    auto id = (*ep)->prepare({Op::kRead, 0, 0, 0, 0, 64, false});
    ASSERT_TRUE(id.isOk());
    auto t = (*ep)->post(*id);
    ASSERT_TRUE(t.isOk());
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = (*ep)->wait(*t, mode, Deadline::afterMs(200));
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
    EXPECT_EQ(st.code(), StatusCode::kTimeout) << waitModeName(mode) << ": " << st.toString();
    EXPECT_LT(ms.count(), 2000) << waitModeName(mode);
    // One post per request at a time.
    EXPECT_EQ((*ep)->post(*id).status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ((*ep)->waitNotifications(1, WaitMode::kYield, Deadline::afterMs(100)).code(), StatusCode::kTimeout);
  EXPECT_TRUE(boot.barrier(Deadline::afterMs(10'000)).isOk());
}

TEST(FakeNixl, RegistrationFailureIsUnsupportedWithTheReason) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, fakeNixlEnv("register_error"));
  std::vector<uint64_t> storage;
  auto ep = connectFake(boot, Library::kNixl, storage);
  ASSERT_FALSE(ep.isOk());
  EXPECT_EQ(ep.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(ep.status().message().find("registering GPU memory (VRAM) failed"), std::string::npos)
      << ep.status().message();
}

TEST(FakeNixl, EachCapabilityStepIsChecked) {
  for (const char* scenario : {"no_vram", "backend_error", "prepare_error"}) {
    SCOPED_TRACE(scenario);
    auto r = runTestAsRanks(2, std::chrono::seconds(60), fakeNixlEnv(scenario));
    if (!r.is_parent) {
      std::vector<uint64_t> storage;
      auto ep = connectFake(*r.bootstrap, Library::kNixl, storage);
      ASSERT_FALSE(ep.isOk());
      const std::string s = std::getenv("PEERLAB_FAKE_NIXL");
      const char* want = s == "no_vram"         ? "does not list VRAM"
                         : s == "backend_error" ? "backend could not be created"
                                                : "descriptor list";
      EXPECT_NE(ep.status().message().find(want), std::string::npos) << ep.status().message();
      return;
    }
    ASSERT_TRUE(r.status.isOk()) << r.status.toString();
  }
}

TEST(FakeNixl, TransfersAndErrors) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, fakeNixlEnv("ok"));
  std::vector<uint64_t> storage;
  auto ep = connectFake(boot, Library::kNixl, storage, /*progress=*/true);
  ASSERT_TRUE(ep.isOk()) << ep.status().toString();
  auto id = (*ep)->prepare({Op::kWrite, 1, 0, 0, 0, 512, true});
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  for (WaitMode mode : {WaitMode::kSpin, WaitMode::kYield, WaitMode::kProgressThread}) {
    auto t = (*ep)->post(*id);
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    EXPECT_TRUE((*ep)->wait(*t, mode, Deadline::afterMs(5000)).isOk()) << waitModeName(mode);
  }
  EXPECT_TRUE((*ep)->release(*id).isOk());
  EXPECT_TRUE(boot.barrier(Deadline::afterMs(10'000)).isOk());
}

// With the endpoint's own progress thread, NIXL's stays off (the endpoint progresses UCX); without it, NIXL's runs.
TEST(FakeNixl, ProgressThreadIsNixlsOnlyWithoutTheEndpointsOwn) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, fakeNixlEnv("ok"));
  for (bool progress : {true, false}) {
    std::vector<uint64_t> storage;
    auto ep = connectFake(boot, Library::kNixl, storage, progress);
    ASSERT_TRUE(ep.isOk()) << ep.status().toString();
    const std::string& d = (*ep)->description();
    EXPECT_NE(d.find(progress ? "(no NIXL progress thread)" : "(NIXL progress thread)"), std::string::npos) << d;
    EXPECT_TRUE(boot.barrier(Deadline::afterMs(10'000)).isOk());
  }
}

// A transfer above nixl_descriptor_bytes goes as several descriptors on both sides (the stand-in refuses a request
// whose lists hold any other number than PEERLAB_FAKE_NIXL_DESCRIPTORS).
TEST(FakeNixl, LargeTransfersSplitIntoDescriptors) {
  std::vector<std::string> env = fakeNixlEnv("ok");
  env.push_back("PEERLAB_FAKE_NIXL_DESCRIPTORS=3");
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, env);
  std::vector<uint64_t> storage;
  EndpointOptions o;
  o.library = Library::kNixl;
  o.peer = 1 - boot.rank();
  o.regions = fakeDeviceRegions(storage);
  o.progress_thread = true;
  o.nixl_descriptor_bytes = 1000;
  o.nixl_backend_params = {{"num_workers", "2"}};
  auto ep = Endpoint::connect(boot, o);
  ASSERT_TRUE(ep.isOk()) << ep.status().toString();
  EXPECT_TRUE((*ep)->prepare({Op::kWrite, 0, 0, 0, 0, 2500, false}).isOk());   // 834 + 834 + 832
  EXPECT_FALSE((*ep)->prepare({Op::kWrite, 0, 0, 0, 0, 1000, false}).isOk());  // one descriptor
  EXPECT_TRUE(boot.barrier(Deadline::afterMs(10'000)).isOk());
}

TEST(FakeNixl, BackendParameterFailureIsUnsupported) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, fakeNixlEnv("params_error"));
  std::vector<uint64_t> storage;
  EndpointOptions o;
  o.library = Library::kNixl;
  o.peer = 1 - boot.rank();
  o.regions = fakeDeviceRegions(storage);
  o.nixl_backend_params = {{"num_workers", "2"}};
  auto ep = Endpoint::connect(boot, o);
  ASSERT_FALSE(ep.isOk());
  EXPECT_NE(ep.status().message().find("backend could not be created"), std::string::npos) << ep.status().message();
}

TEST(NixlDescriptors, PiecesCoverTheTransfer) {
  using P = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(nixlDescriptorPieces(0, 0), (P{{0, 0}}));
  EXPECT_EQ(nixlDescriptorPieces(4096, 0), (P{{0, 4096}}));
  EXPECT_EQ(nixlDescriptorPieces(4096, 4096), (P{{0, 4096}}));
  EXPECT_EQ(nixlDescriptorPieces(10, 3), (P{{0, 3}, {3, 3}, {6, 3}, {9, 1}}));
  EXPECT_EQ(nixlDescriptorPieces(9, 3), (P{{0, 3}, {3, 3}, {6, 3}}));
  // At most kNixlMaxDescriptors: larger pieces beyond.
  const P many = nixlDescriptorPieces(size_t{1} << 30, 1);
  ASSERT_EQ(many.size(), kNixlMaxDescriptors);
  size_t covered = 0;
  for (const auto& [at, n] : many) {
    EXPECT_EQ(at, covered);
    covered += n;
  }
  EXPECT_EQ(covered, size_t{1} << 30);
}

TEST(FakeNixl, FailedTransferIsAnError) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, fakeNixlEnv("xfer_error"));
  std::vector<uint64_t> storage;
  auto ep = connectFake(boot, Library::kNixl, storage);
  ASSERT_TRUE(ep.isOk()) << ep.status().toString();
  auto id = (*ep)->prepare({Op::kRead, 0, 0, 1, 0, 64, false});
  ASSERT_TRUE(id.isOk());
  auto t = (*ep)->post(*id);
  ASSERT_TRUE(t.isOk());
  const Status st = (*ep)->wait(*t, WaitMode::kSpin, Deadline::afterMs(2000));
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("NIXL_CAPI_ERROR_BACKEND"), std::string::npos) << st.message();
  EXPECT_TRUE(boot.barrier(Deadline::afterMs(10'000)).isOk());
}

// ---- real libraries, host memory, two processes ----

// Rank 0 writes its pattern into rank 1's buffer and notifies; rank 1 checks it, then reads rank 0's second buffer
// back into its own second buffer and checks that too. Each side poisons what it receives first.
void hostRoundTrip(Bootstrap& boot, Library library) {
  const Found found = findLibrary(library);
  if (!found.found) GTEST_SKIP() << found.describe(library);
  constexpr size_t kBytes = 1 << 20;
  const int me = boot.rank();
  const int peer = 1 - me;
  std::vector<uint8_t> a(kBytes), b(kBytes);
  const uint64_t run = 0x7A11 + static_cast<uint64_t>(::getppid());
  const uint64_t seed_write = patternSeed(run, 0, 1, 1);
  const uint64_t seed_read = patternSeed(run, 0, 1, 2);
  if (me == 0) {
    fillPatternHost(a.data(), kBytes, seed_write);
    fillPatternHost(b.data(), kBytes, seed_read);
  } else {
    poisonPatternHost(a.data(), kBytes, seed_write);
    poisonPatternHost(b.data(), kBytes, seed_read);
  }
  EndpointOptions o;
  o.library = library;
  o.peer = peer;
  o.regions = {{a.data(), kBytes, MemoryKind::kHost, -1}, {b.data(), kBytes, MemoryKind::kHost, -1}};
  o.deadline = Deadline::afterMs(30'000);
  o.progress_thread = true;
  auto ep = Endpoint::connect(boot, o);
  if (!ep.isOk() && ep.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << ep.status().toString();
  ASSERT_TRUE(ep.isOk()) << ep.status().toString();
  EXPECT_FALSE((*ep)->description().empty());
  ASSERT_EQ((*ep)->remote().size(), 2u);
  EXPECT_EQ((*ep)->remote()[0].bytes, kBytes);
  const Deadline d = Deadline::afterMs(20'000);
  if (me == 0) {
    auto id = (*ep)->prepare({Op::kWrite, 0, 0, 0, 0, kBytes, true});
    ASSERT_TRUE(id.isOk()) << id.status().toString();
    auto t = (*ep)->post(*id);
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    ASSERT_TRUE((*ep)->wait(*t, WaitMode::kYield, d).isOk());
  } else {
    ASSERT_TRUE((*ep)->waitNotifications(1, WaitMode::kYield, d).isOk());
    const PatternCheck c = checkPatternHost(a.data(), kBytes, seed_write, 8);
    EXPECT_EQ(c.wrong, 0u) << "first bad byte " << c.first_bad;
    EXPECT_EQ(c.elements, kBytes / 8);
    // Read the second half of rank 0's buffer b into b, in two transfers, with the progress thread.
    for (size_t half : {size_t{0}, kBytes / 2}) {
      auto id = (*ep)->prepare({Op::kRead, 1, half, 1, half, kBytes / 2, false});
      ASSERT_TRUE(id.isOk()) << id.status().toString();
      auto t = (*ep)->post(*id);
      ASSERT_TRUE(t.isOk());
      ASSERT_TRUE((*ep)->wait(*t, WaitMode::kProgressThread, d).isOk());
    }
    const PatternCheck r = checkPatternHost(b.data(), kBytes, seed_read, 8);
    EXPECT_EQ(r.wrong, 0u) << "first bad byte " << r.first_bad;
  }
  // Neither side frees memory the other may still access.
  ASSERT_TRUE(boot.barrier(Deadline::afterMs(20'000)).isOk());
}

TEST(RealUcx, HostMemoryMovesBetweenProcesses) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 90, {});
  hostRoundTrip(boot, Library::kUcx);
}

TEST(RealNixl, HostMemoryMovesBetweenProcesses) {
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 90, {});
  hostRoundTrip(boot, Library::kNixl);
}

TEST(RealUcx, HostMemoryOfferedAsGpuMemoryIsRefused) {
  // A real UCX registers a host buffer as host memory: offered as GPU memory, the capability check refuses it
  // exactly as it refuses a GPU buffer under a UCX without CUDA.
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, {});
  const Found found = findLibrary(Library::kUcx);
  if (!found.found) GTEST_SKIP() << found.describe(Library::kUcx);
  std::vector<uint64_t> storage;
  EndpointOptions o;
  o.library = Library::kUcx;
  o.peer = 1 - boot.rank();
  o.regions = fakeDeviceRegions(storage);
  o.deadline = Deadline::afterMs(20'000);
  auto ep = Endpoint::connect(boot, o);
  ASSERT_FALSE(ep.isOk());
  EXPECT_EQ(ep.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(ep.status().message().find(kUcxNoCudaReason), std::string::npos) << ep.status().message();
  const bool context_cuda = ep.status().message().find("context memory types: host, cuda") != std::string::npos;
  if (found.cuda_module && context_cuda) {
    // The context lists CUDA here: the host buffer itself is what registers as host memory.
    EXPECT_NE(ep.status().message().find("registered as host"), std::string::npos) << ep.status().message();
  } else {
    // No CUDA module beside libucp, or one that found no GPU (a CPU-only machine): the context itself lacks CUDA.
    EXPECT_EQ(ep.status().message().find("cuda"), std::string::npos) << ep.status().message();
  }
}

TEST(RealNixl, HostMemoryOfferedAsGpuMemoryIsRefusedByItsOwnUcx) {
  // NIXL's bundled UCX is asked directly: a host buffer offered as GPU memory registers as host memory there.
  PEERLAB_TEST_RANKS_TIMEOUT(2, boot, 60, {});
  const Found found = findLibrary(Library::kNixl);
  if (!found.found) GTEST_SKIP() << found.describe(Library::kNixl);
  std::vector<uint64_t> storage;
  auto ep = connectFake(boot, Library::kNixl, storage);
  ASSERT_FALSE(ep.isOk());
  EXPECT_EQ(ep.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(ep.status().message().find("NIXL's UCX"), std::string::npos) << ep.status().message();
  EXPECT_NE(ep.status().message().find(kUcxNoCudaReason), std::string::npos) << ep.status().message();
}

}  // namespace
}  // namespace peerlab::transport
