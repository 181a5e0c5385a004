// Host-side logic of the host <-> device paths: node lists, the GPU's node from sysfs, node choice, mbind masks and
// fallbacks, pageable buffers, launch and chain math, the memory peak formula. No GPU needed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "reference/host/host_copy.h"
#include "reference/host/host_memory.h"
#include "reference/host/numa.h"
#include "reference/testing/testing.h"

namespace peerlab::host {
namespace {

namespace fs = std::filesystem;

// A throwaway sysfs tree.
class FakeSysfs {
 public:
  FakeSysfs() {
    std::string tmpl = (fs::temp_directory_path() / "peerlab_sysfs_XXXXXX").string();
    root_ = mkdtemp(tmpl.data());
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  void write(const std::string& rel, const std::string& text) const {
    fs::create_directories((fs::path(root_) / rel).parent_path());
    std::ofstream(fs::path(root_) / rel) << text;
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

TEST(NodeList, ParsesSinglesRangesAndMixes) {
  EXPECT_EQ(*parseNodeList("0\n"), std::vector<int>({0}));
  EXPECT_EQ(*parseNodeList("0-3"), std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(*parseNodeList("0,2-3,7"), std::vector<int>({0, 2, 3, 7}));
  EXPECT_EQ(*parseNodeList("3,1,1"), std::vector<int>({1, 3}));
  EXPECT_TRUE(parseNodeList("").value().empty());
}

TEST(NodeList, RejectsBadItemsNamingThem) {
  for (const char* bad : {"a", "1-", "-1", "3-1", "4294967296", "0,,1", "99999"}) {
    auto r = parseNodeList(bad);
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("node list"), std::string::npos) << r.status().toString();
  }
}

TEST(Sysfs, ReadsTheGpuNodeAndTheOnlineNodes) {
  FakeSysfs s;
  s.write("devices/system/node/online", "0-1\n");
  s.write("bus/pci/devices/0000:17:00.0/numa_node", "1\n");
  s.write("bus/pci/devices/0000:18:00.0/numa_node", "-1\n");
  s.write("bus/pci/devices/0000:19:00.0/numa_node", "banana\n");
  EXPECT_EQ(*onlineNodes(s.root()), std::vector<int>({0, 1}));
  EXPECT_EQ(pciNumaNode("0000:17:00.0", s.root()).value(), std::optional<int>(1));
  EXPECT_EQ(pciNumaNode("0000:18:00.0", s.root()).value(), std::nullopt);
  EXPECT_EQ(pciNumaNode("0000:20:00.0", s.root()).value(), std::nullopt);  // missing file
  auto bad = pciNumaNode("0000:19:00.0", s.root());
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("banana"), std::string::npos);
  EXPECT_FALSE(pciNumaNode("../../etc", s.root()).isOk());
}

TEST(Sysfs, NoNodeDirectoryMeansNoNodes) {
  FakeSysfs s;
  EXPECT_TRUE(onlineNodes(s.root()).value().empty());
  s.write("devices/system/node/online", "0-x\n");
  EXPECT_FALSE(onlineNodes(s.root()).isOk());
}

TEST(ChooseNodes, LocalIsTheGpusNodeAndRemoteAnother) {
  NodeChoice c = chooseNodes(1, {0, 1});
  EXPECT_EQ(c.local, 1);
  EXPECT_EQ(c.remote, 0);
  c = chooseNodes(0, {0, 1, 2, 3});
  EXPECT_EQ(c.local, 0);
  EXPECT_EQ(c.remote, 1);
}

TEST(ChooseNodes, OneNodeHasNoRemote) {
  NodeChoice c = chooseNodes(std::nullopt, {0});
  EXPECT_EQ(c.local, 0);
  EXPECT_EQ(c.remote, std::nullopt);
  c = chooseNodes(0, {0});
  EXPECT_EQ(c.local, 0);
  EXPECT_EQ(c.remote, std::nullopt);
}

TEST(ChooseNodes, UnknownOrOfflineGpuNodeOnSeveralNodesIsUnknown) {
  NodeChoice c = chooseNodes(std::nullopt, {0, 1});
  EXPECT_EQ(c.local, std::nullopt);
  EXPECT_EQ(c.remote, std::nullopt);
  c = chooseNodes(5, {0, 1});
  EXPECT_EQ(c.local, std::nullopt);
  c = chooseNodes(std::nullopt, {});
  EXPECT_EQ(c.local, std::nullopt);
}

TEST(NodeMask, SetsExactlyTheNodesBit) {
  constexpr int kBits = static_cast<int>(sizeof(unsigned long) * CHAR_BIT);
  EXPECT_EQ(nodeMask(0), std::vector<unsigned long>({1ul}));
  EXPECT_EQ(nodeMask(3), std::vector<unsigned long>({8ul}));
  const auto m = nodeMask(kBits + 2);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], 0ul);
  EXPECT_EQ(m[1], 4ul);
  EXPECT_TRUE(nodeMask(-1).empty());
}

TEST(Mbind, BindsToAnOnlineNodeOrSaysWhyNot) {
  auto online = onlineNodes();
  ASSERT_TRUE(online.isOk()) << online.status().toString();
  if (online->empty()) GTEST_SKIP() << "no NUMA nodes in /sys/devices/system/node/online";
  HostPlacement where;
  where.pinned = false;
  where.node = online->back();
  auto buf = allocHost(1 << 20, where);
  if (!buf.isOk() && buf.status().code() == StatusCode::kUnavailable) {
    // A container without mbind: the fallback keeps the kernel's placement.
    where.node_required = false;
    auto loose = allocHost(1 << 20, where);
    ASSERT_TRUE(loose.isOk()) << loose.status().toString();
    GTEST_SKIP() << "mbind unavailable here: " << buf.status().toString();
  }
  ASSERT_TRUE(buf.isOk()) << buf.status().toString();
  EXPECT_EQ((*buf)->node, online->back());
  auto node = nodeOfPage((*buf)->as<char>() + ((1 << 20) - 1));
  ASSERT_TRUE(node.isOk()) << node.status().toString();
  EXPECT_EQ(*node, online->back());
}

TEST(Mbind, RejectsBadInputWithoutTouchingMemory) {
  alignas(64) static char not_a_page[64];
  EXPECT_EQ(bindToNode(not_a_page + 1, 64, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bindToNode(nullptr, 4096, -1).code(), StatusCode::kInvalidArgument);
  HostPlacement nowhere;
  nowhere.pinned = false;
  nowhere.node = 4000;  // no machine has it online
  auto r = allocHost(4096, nowhere);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("node 4000"), std::string::npos) << r.status().toString();
}

TEST(HostBuffer, PageableBufferIsWholePagesAndWritable) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  HostPlacement pageable;
  pageable.pinned = false;
  auto buf = allocHost(page + 1, pageable);
  ASSERT_TRUE(buf.isOk()) << buf.status().toString();
  EXPECT_EQ((*buf)->bytes, page + 1);
  EXPECT_EQ((*buf)->mapped_bytes, 2 * page);
  EXPECT_FALSE((*buf)->registered);
  (*buf)->as<char>()[page] = 7;
  EXPECT_EQ((*buf)->as<char>()[page], 7);
  EXPECT_EQ(allocHost(0, pageable).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pageRound(1, 4096), 4096u);
  EXPECT_EQ(pageRound(4096, 4096), 4096u);
  EXPECT_EQ(pageRound(0, 4096), 4096u);
}

TEST(Plan, SmLaunchFillsTheGpuButNeverExceedsTheWork) {
  SmLaunch l = planSmLaunch(132, size_t{256} << 20);
  EXPECT_EQ(l.threads, 512);
  EXPECT_EQ(l.blocks, 132 * 4);
  l = planSmLaunch(132, 16 * 512 * 3);  // three blocks of vectors
  EXPECT_EQ(l.blocks, 3);
  l = planSmLaunch(132, 1);
  EXPECT_EQ(l.blocks, 1);
  l = planSmLaunch(0, 1 << 20, 4096, 0);
  EXPECT_EQ(l.threads, 1024);
  EXPECT_EQ(l.blocks, 1);
}

TEST(Plan, ChaseChainNodes) {
  EXPECT_EQ(chaseNodes(1 << 20, 128), 8192u);
  EXPECT_EQ(chaseNodes(100, 128), 0u);
  EXPECT_EQ(chaseNodes(4096, 4), 0u);
  EXPECT_EQ(chaseNodes(4096, 12), 0u);
}

TEST(Plan, MemoryPeakFromBusWidthAndClock) {
  // H100 SXM: 5120-bit HBM3 at 2619 MHz: 3352 GB/s (the data sheet's 3.35 TB/s).
  EXPECT_NEAR(memoryPeakGbps(5120, 2619000), 3352.3, 0.1);
  // H200: 6144-bit HBM3e at 3201 MHz: 4917 GB/s (data sheet 4.8 TB/s).
  EXPECT_NEAR(memoryPeakGbps(6144, 3201000), 4916.7, 0.1);
  EXPECT_EQ(memoryPeakGbps(0, 2619000), 0);
  EXPECT_EQ(memoryPeakGbps(5120, -1), 0);
  EXPECT_EQ(directionName(Direction::kHostToDevice), "h2d");
  EXPECT_EQ(directionName(Direction::kDeviceToHost), "d2h");
}

}  // namespace
}  // namespace peerlab::host
