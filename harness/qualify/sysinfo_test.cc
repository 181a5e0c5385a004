#include "harness/qualify/sysinfo.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/testing/cli.h"
#include "reference/testing/testing.h"

namespace peerlab::qualify {
namespace {

namespace fs = std::filesystem;

void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Extended config space: AER at 0x100, then ACS at 0x140 with the given registers.
std::vector<uint8_t> configWithAcs(uint16_t cap, uint16_t ctl) {
  std::vector<uint8_t> b(4096, 0);
  put32(b, 0x100, 0x0001u | (1u << 16) | (0x140u << 20));
  put32(b, 0x140, 0x000Du | (1u << 16));
  put32(b, 0x144, static_cast<uint32_t>(cap) | (static_cast<uint32_t>(ctl) << 16));
  return b;
}

void writeBytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void writeText(const fs::path& p, const std::string& s) {
  std::ofstream(p) << s;
}

TEST(Sysinfo, FindsAndDecodesAcs) {
  auto acs = findAcs(configWithAcs(0x007F, 0x001D));
  ASSERT_TRUE(acs.has_value());
  EXPECT_EQ(acs->capability, 0x007F);
  EXPECT_EQ(acs->control, 0x001D);
  EXPECT_EQ(formatAcsBits(0x001D), "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-");
  // Only the first 256 bytes (or 64, unprivileged): no extended space to search.
  EXPECT_FALSE(findAcs(std::vector<uint8_t>(256, 0)).has_value());
  // An extended capability list without ACS, and a list that loops, end without a result.
  std::vector<uint8_t> noAcs(4096, 0);
  put32(noAcs, 0x100, 0x0001u | (1u << 16));
  EXPECT_FALSE(findAcs(noAcs).has_value());
  std::vector<uint8_t> loop(4096, 0);
  put32(loop, 0x100, 0x0001u | (0x100u << 20));
  EXPECT_FALSE(findAcs(loop).has_value());
}

// A fake sysfs: a root port with ACS above a GPU whose config space is only partly readable, and IOMMU groups.
TEST(Sysinfo, FakeSysfsTree) {
  const fs::path root = testing::scratchDir("sysfs");
  const fs::path port = root / "devices/pci0000:00/0000:00:01.0";
  const fs::path gpu = port / "0000:01:00.0";
  fs::create_directories(gpu);
  fs::create_directories(root / "bus/pci/devices");
  fs::create_symlink(port, root / "bus/pci/devices/0000:00:01.0");
  fs::create_symlink(gpu, root / "bus/pci/devices/0000:01:00.0");
  writeBytes(port / "config", configWithAcs(0x007F, 0x001D));
  writeBytes(gpu / "config", std::vector<uint8_t>(64, 0));
  writeText(port / "class", "0x060400\n");
  writeText(port / "vendor", "0x8086\n");
  writeText(port / "device", "0x2030\n");
  writeText(gpu / "class", "0x030200\n");
  writeText(gpu / "vendor", "0x10de\n");
  writeText(gpu / "device", "0x2335\n");
  fs::create_directories(root / "kernel/iommu_groups/7/devices");
  fs::create_directories(root / "kernel/iommu_groups/12/devices");
  writeText(root / "kernel/iommu_groups/7/devices/0000:01:00.0", "");
  writeText(root / "kernel/iommu_groups/12/devices/0000:00:01.0", "");

  EXPECT_EQ(pciPath("0000:01:00.0", root.string()), (std::vector<std::string>{"0000:00:01.0", "0000:01:00.0"}));
  const std::string acs = describeAcs({"0000:01:00.0"}, root.string());
  EXPECT_NE(acs.find("2 functions: 1 with ACS, 1 with only the first bytes of config space readable"),
            std::string::npos)
      << acs;
  EXPECT_NE(acs.find("0000:00:01.0 class 0x060400 8086:2030: ACSCap: SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ "
                     "UpstreamFwd+ EgressCtrl+ DirectTrans+ | ACSCtl: SrcValid+ TransBlk- ReqRedir+"),
            std::string::npos)
      << acs;
  EXPECT_NE(acs.find("0000:01:00.0 class 0x030200 10de:2335: unreadable: only 64 bytes of config space"),
            std::string::npos)
      << acs;
  const std::string iommu = describeIommu({"0000:01:00.0"}, root.string());
  EXPECT_NE(iommu.find("0000:01:00.0: group 7 (1 device in the group)"), std::string::npos) << iommu;
  EXPECT_NE(iommu.find("group 12: 0000:00:01.0 class 0x060400 8086:2030"), std::string::npos) << iommu;
  EXPECT_NE(iommu.find("group 7: 0000:01:00.0 class 0x030200 10de:2335  <- GPU"), std::string::npos) << iommu;

  // Nothing there: said so, never an exception.
  const fs::path empty = testing::scratchDir("sysfs-empty");
  EXPECT_EQ(describeIommu({}, empty.string()).rfind("unreadable: ", 0), 0u);
  EXPECT_EQ(describeAcs({}, empty.string()).rfind("unreadable: ", 0), 0u);
  EXPECT_EQ(kernelCommandLine(empty.string()).rfind("unreadable: ", 0), 0u);
  writeText(empty / "cmdline", "BOOT_IMAGE=/vmlinuz iommu=pt\n");
  EXPECT_EQ(kernelCommandLine(empty.string()), "BOOT_IMAGE=/vmlinuz iommu=pt");
}

}  // namespace
}  // namespace peerlab::qualify
