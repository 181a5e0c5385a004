#include "harness/report/report.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "harness/report/compressed.h"
#include "harness/report/json_in.h"
#include "reference/core/files.h"
#include "reference/testing/testing.h"

namespace peerlab::report {
namespace {

using nlohmann::json;

json loadSample() {
  std::ifstream f(testing::sourcePath("reports/schema/sample-run.json"));
  return json::parse(f);
}

std::string writeTemp(const std::string& text) {
  auto path = std::filesystem::temp_directory_path() /
              ("peerlab-report-test-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()) + ".json");
  std::ofstream(path) << text;
  return path.string();
}

TEST(RunSchema, TheCommittedSampleValidates) {
  json doc = loadSample();
  PEERLAB_EXPECT_OK(validate(doc));
  auto run = fromJson(doc);
  ASSERT_TRUE(run.isOk()) << run.status().toString();
  EXPECT_EQ(run->fingerprint.gpus.size(), 2u);
  ASSERT_EQ(run->results.size(), 6u);
  EXPECT_EQ(run->results[0].extra.value("claimed", false), true);
  EXPECT_FALSE(run->results[1].src.has_value());
  EXPECT_EQ(run->results[5].status, "skipped: torch is not importable");
}

TEST(RunSchema, TheSchemaDocumentNamesTheSameRequiredKeys) {
  std::ifstream f(testing::sourcePath("reports/schema/run.schema.json"));
  json schema = json::parse(f);
  EXPECT_EQ(schema["properties"]["schema_version"]["const"], kSchemaVersion);
  auto required = schema["properties"]["results"]["items"]["required"];
  json sample = loadSample();
  for (const auto& key : required) {
    json broken = sample;
    broken["results"][0].erase(key.get<std::string>());
    EXPECT_FALSE(validate(broken).isOk()) << "the validator accepts a result without " << key;
  }
  for (const auto& key : schema["required"]) {
    json broken = sample;
    broken.erase(key.get<std::string>());
    EXPECT_FALSE(validate(broken).isOk()) << "the validator accepts a run without " << key;
  }
}

TEST(RunSchema, RejectsWrongTypesWithThePath) {
  json doc = loadSample();
  doc["results"][2]["time_us"] = "fast";
  Status st = validate(doc);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("$.results[2].time_us"), std::string::npos) << st.message();
  doc = loadSample();
  doc["results"][0]["ranks"] = 0;
  EXPECT_FALSE(validate(doc).isOk());
  doc = loadSample();
  doc["schema_version"] = 2;
  st = validate(doc);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("unsupported schema version 2"), std::string::npos);
}

TEST(RunSchema, RoundTripsThroughWriteAndRead) {
  report::Run run = newRun();
  run.fingerprint.hostname = "h";
  run.fingerprint.driver = "580.159.04";
  run.fingerprint.cuda_runtime = "13.0";
  run.fingerprint.nccl = "2.28.3";
  Result r;
  r.suite = "zcopy";
  r.name = "uni";
  r.impl = "peerlab.get";
  r.src = 0;
  r.dst = 1;
  r.ranks = 2;
  r.bytes = 1024;
  r.time_us = 3.5;
  r.wrong = 0;
  r.extra["sms"] = 0;
  run.results.push_back(r);
  run.kind.name = "h200-x4-nvswitch";
  run.kind.source = KindSource::kOption;
  const std::string path = writeTemp("");
  PEERLAB_ASSERT_OK(writeRun(run, path));
  auto back = readRun(path);
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->results.size(), 1u);
  EXPECT_EQ(*back->results[0].time_us, 3.5);
  EXPECT_FALSE(back->results[0].algbw_gbps.has_value());
  EXPECT_EQ(back->results[0].extra["sms"], 0);
  EXPECT_EQ(back->kind.name, "h200-x4-nvswitch");
  EXPECT_EQ(back->kind.source, KindSource::kOption);
  EXPECT_FALSE(back->extra.contains("kind"));
  EXPECT_EQ(back->tool.rfind("peerlab ", 0), 0u);
  std::filesystem::remove(path);
}

TEST(RunSchema, BadFilesGiveOneLineNamingTheFile) {
  auto missing = readRun("/nonexistent/run.json");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(missing.status().message(), "/nonexistent/run.json: no such file");

  std::string text = loadSample().dump();
  const std::string truncated = writeTemp(text.substr(0, text.size() / 2));
  auto t = readRun(truncated);
  ASSERT_FALSE(t.isOk());
  EXPECT_EQ(t.status().message().rfind(truncated + ": malformed JSON (parse error at line 1", 0), 0u)
      << t.status().message();
  EXPECT_EQ(t.status().message().find('\n'), std::string::npos);

  json v2 = loadSample();
  v2["schema_version"] = 7;
  const std::string wrongVersion = writeTemp(v2.dump());
  auto w = readRun(wrongVersion);
  ASSERT_FALSE(w.isOk());
  EXPECT_NE(w.status().message().find("unsupported schema version 7"), std::string::npos);

  const std::string empty = writeTemp("");
  EXPECT_EQ(readRun(empty).status().message(), empty + ": empty file");

  // A number too large for a double is a parse failure too (the parser reports it as out of range, not as a parse
  // error): found by the report fuzzer.
  const std::string huge = writeTemp(R"({"schema_version": 1e999999})");
  auto h = readRun(huge);
  ASSERT_FALSE(h.isOk());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(h.status().message().rfind(huge + ": malformed JSON (number overflow", 0), 0u) << h.status().message();
  for (const auto& p : {truncated, wrongVersion, empty, huge})
    std::filesystem::remove(p);
}

// Committed runs are stored gzip-compressed (reports/README.md): the one reader takes them as they are, bounded.
TEST(RunReader, GzipRunFilesReadLikePlainOnes) {
  if (!haveGzip()) GTEST_SKIP() << "built without zlib: gzip-compressed run files are refused (tested below)";
  const std::string text = loadSample().dump(2);
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::string packed, gzip(text));
  EXPECT_TRUE(isGzip(packed));
  EXPECT_LT(packed.size(), text.size());
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::string back, gunzip(packed, text.size()));
  EXPECT_EQ(back, text);
  // One byte short of the whole: refused, naming the bound.
  auto bomb = gunzip(packed, text.size() - 1);
  ASSERT_FALSE(bomb.isOk());
  EXPECT_NE(bomb.status().message().find("inflates past"), std::string::npos) << bomb.status().message();

  const std::string plain = writeTemp(text);
  const std::string gz = writeTemp(packed);
  auto a = readRun(plain);
  auto b = readRun(gz);
  ASSERT_TRUE(a.isOk()) << a.status().toString();
  ASSERT_TRUE(b.isOk()) << b.status().toString();
  EXPECT_EQ(toJson(*a), toJson(*b));

  // writeRun compresses where the path ends in .gz, and the result reads back.
  const std::string out = writeTemp("") + ".gz";
  PEERLAB_ASSERT_OK(writeRun(*a, out));
  PEERLAB_ASSERT_OK_AND_ASSIGN(std::string written, readTextFile(out));
  EXPECT_TRUE(isGzip(written));
  auto c = readRun(out);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(toJson(*a), toJson(*c));

  // Truncated and corrupt members: one line naming the file, never a crash.
  const std::string cut = writeTemp(packed.substr(0, packed.size() / 2));
  auto t = readRun(cut);
  ASSERT_FALSE(t.isOk());
  EXPECT_EQ(t.status().message(), cut + ": gzip data is truncated");
  std::string flipped = packed;
  flipped[flipped.size() / 2] = static_cast<char>(flipped[flipped.size() / 2] ^ 0x5a);
  const std::string bad = writeTemp(flipped);
  auto f = readRun(bad);
  ASSERT_FALSE(f.isOk());
  EXPECT_EQ(f.status().message().rfind(bad + ": ", 0), 0u) << f.status().message();
  EXPECT_EQ(f.status().message().find('\n'), std::string::npos);
  // Two members one after the other read as their concatenation (what `cat a.gz b.gz` gives): here that is two
  // documents, which is malformed JSON, not a crash or the first alone.
  const std::string twice = writeTemp(packed + packed);
  auto d = readRun(twice);
  ASSERT_FALSE(d.isOk());
  EXPECT_NE(d.status().message().find("malformed JSON"), std::string::npos) << d.status().message();
  for (const auto& p : {plain, gz, out, cut, bad, twice})
    std::filesystem::remove(p);
}

TEST(RunReader, GzipIsRefusedWithTheReasonWithoutZlib) {
  if (haveGzip()) GTEST_SKIP() << "built with zlib (the test above reads gzip-compressed runs)";
  const std::string gz = writeTemp(std::string("\x1f\x8b\x08\x00", 4));
  auto r = readRun(gz);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("built without zlib"), std::string::npos) << r.status().message();
  std::filesystem::remove(gz);
}

// Untrusted run files: every value any part of peerlab reads is checked, refused with its JSON path and value.
Status refused(const std::function<void(json&)>& edit) {
  json doc = loadSample();
  edit(doc);
  return validate(doc);
}

void expectRefused(const std::function<void(json&)>& edit, const std::string& path, const std::string& why) {
  Status st = refused(edit);
  ASSERT_FALSE(st.isOk()) << path;
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(path), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
}

TEST(RunReader, GpuIndicesStayWithinTheRunsGpus) {
  for (json bad : {json(2), json(1000), json(1024), json(-1), json(2147483647), json(46341), json(1e300)}) {
    SCOPED_TRACE(bad.dump());
    expectRefused([&](json& d) { d["results"][2]["src"] = bad; }, "$.results[2].src",
                  bad.is_number_integer() ? "is not a GPU of this run (0..1: the fingerprint lists 2 GPUs)"
                                          : "must be an integer or null");
  }
  // Without GPUs in the fingerprint the plan's topology bounds them, and always kMaxGpus.
  Status st = refused([](json& d) {
    d["fingerprint"]["gpus"] = json::array();
    d["results"][2]["dst"] = kMaxGpus;
  });
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("the most a run may hold"), std::string::npos) << st.message();
  expectRefused(
      [](json& d) {
        json g = d["fingerprint"]["gpus"][0];
        d["fingerprint"]["gpus"] = json::array();
        for (int i = 0; i < kMaxGpus + 1; ++i)
          d["fingerprint"]["gpus"].push_back(g);
      },
      "$.fingerprint.gpus", "more than the 256 a run may hold");
}

TEST(RunReader, NumbersMustBeFiniteAndNotNegative) {
  expectRefused([](json& d) { d["results"][2]["time_us"] = -3.0; }, "$.results[2].time_us", "-3.0 is outside");
  expectRefused([](json& d) { d["results"][2]["time_us"] = 0; }, "$.results[2].time_us", "0 is not a time");
  expectRefused([](json& d) { d["results"][2]["bytes"] = -4096; }, "$.results[2].bytes", "-4096 is outside");
  expectRefused([](json& d) { d["results"][2]["algbw_gbps"] = 1e308; }, "$.results[2].algbw_gbps", "is outside");
  expectRefused([](json& d) { d["results"][2]["busbw_gbps"] = -1; }, "$.results[2].busbw_gbps", "is outside");
  expectRefused([](json& d) { d["results"][2]["wrong"] = 1e300; }, "$.results[2].wrong", "is outside");
  expectRefused([](json& d) { d["results"][2]["wrong"] = 1.5; }, "$.results[2].wrong", "whole number");
  expectRefused(
      [](json& d) {
        d["results"][2]["samples_us"] = {1.0, -2.0};
      },
      "$.results[2].samples_us[1]", "is outside");
  expectRefused(
      [](json& d) {
        d["plan"] = {{"topology", {{"gpus", {{{"index", 0}, {"nvlinks", 1e300}}}}, {"pairs", json::array()}}}};
      },
      "$.plan.topology.gpus[0].nvlinks", "must be an integer");
}

TEST(RunReader, OptionalKeysAreTypedToo) {
  expectRefused([](json& d) { d["bench"] = {{"jobs", {{{"exit", 3}}}}}; }, "$.bench.jobs[0].exit", "must be a string");
  expectRefused(
      [](json& d) {
        d["plan"] = {{"topology", {{"source", 7}, {"gpus", json::array()}, {"pairs", json::array()}}}};
      },
      "$.plan.topology.source", "must be a string");
  expectRefused(
      [](json& d) {
        d["plan"] = {{"expectations", {{{"rule", "r"}, {"suite", 12}}}}};
      },
      "$.plan.expectations[0].suite", "must be a string");
  expectRefused(
      [](json& d) {
        d["qualify"] = {{"verdict", "MAYBE"}};
      },
      "$.qualify.verdict", "is not PASS, FAIL or EMPTY");
  expectRefused(
      [](json& d) {
        d["qualify"] = {{"checks", {{{"name", "x"}, {"status", "great"}}}}};
      },
      "$.qualify.checks[0].status", "is not one of");
  expectRefused([](json& d) { d["results"][0]["claimed"] = "yes"; }, "$.results[0].claimed", "must be true or false");
  expectRefused([](json& d) { d["results"][0]["throttled"] = "hot"; }, "$.results[0].throttled", "must be an array");
  expectRefused([](json& d) { d["kind"] = std::string(300, 'k'); }, "$.kind", "longer than the 128 allowed");
  expectRefused([](json& d) { d["kind_overridden"] = "yes"; }, "$.kind_overridden", "must be true or false");
  expectRefused([](json& d) { d["node"] = {{"id", 7}}; }, "$.node.id", "must be a string");
  expectRefused([](json& d) { d["results"][0]["name"] = std::string(300, 'n'); }, "$.results[0].name", "longer");
}

TEST(RunReader, TimestampsAreIsoAndNotInTheFuture) {
  expectRefused([](json& d) { d["timestamp"] = "9999-12-31T00:00:00Z"; }, "$.timestamp", "lies in the future");
  expectRefused([](json& d) { d["timestamp"] = "yesterday"; }, "$.timestamp", "is not an ISO 8601 time");
  expectRefused([](json& d) { d["timestamp"] = "2026-02-30T00:00:00Z"; }, "$.timestamp", "is not an ISO 8601 time");
  EXPECT_TRUE(refused([](json& d) { d["timestamp"] = "2026-11-21T09:00:00.123+01:00"; }).isOk());
  EXPECT_EQ(parseIsoTimestamp("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(parseIsoTimestamp("2026-11-21T09:00:00+01:00"), parseIsoTimestamp("2026-11-21T08:00:00Z"));
}

TEST(RunReader, DeepNestingIsRefusedBeforeParsing) {
  for (size_t depth : {100u, 100000u, 1000000u}) {
    SCOPED_TRACE(depth);
    const std::string text = std::string(depth, '[') + std::string(depth, ']');
    auto run = runFromText(text);
    ASSERT_FALSE(run.isOk());
    EXPECT_NE(run.status().message().find("nested deeper than the 64 levels"), std::string::npos)
        << run.status().message();
  }
  // Deep inside an unread key too.
  json doc = loadSample();
  json deep = json::array();
  for (int i = 0; i < 100; ++i)
    deep = json::array({deep});
  doc["results"][0]["anything"] = deep;
  EXPECT_FALSE(validate(doc).isOk());
}

// Values in a parsed document, counted the way jsonTextShape counts them on the text (keys are not values).
size_t countValues(const json& j) {
  size_t n = 1;
  if (j.is_structured())
    for (const json& v : j)
      n += countValues(v);
  return n;
}

// The values and the memory a document would take are counted on its text, before it is parsed, exactly for values:
// a document past either bound is refused naming it, one within them parses.
TEST(RunReader, ValuesAndMemoryAreBoundedBeforeParsing) {
  const json sample = loadSample();
  for (const std::string& text :
       {sample.dump(), sample.dump(2), std::string("[1, \"a\\\"]\", {\"k\": [true, null]}]")}) {
    const JsonTextShape shape = jsonTextShape(text, {});
    EXPECT_EQ(shape.elements, countValues(json::parse(text))) << text.substr(0, 80);
    EXPECT_GT(shape.memory, text.size() / 4);
  }
  JsonLimits tight;
  tight.max_elements = 10;
  PEERLAB_EXPECT_OK(checkJsonText("[1,2,3,4,5,6,7,8,9]", tight));
  const Status many = checkJsonText("[1,2,3,4,5,6,7,8,9,10]", tight);
  ASSERT_FALSE(many.isOk());
  EXPECT_NE(many.message().find("more than the 10 JSON values allowed"), std::string::npos) << many.message();
  JsonLimits small;
  small.max_memory = 64 << 10;
  const Status big = checkJsonText("[\"" + std::string(70 << 10, 'x') + "\"]", small);
  ASSERT_FALSE(big.isOk());
  EXPECT_NE(big.message().find("MiB allowed once parsed"), std::string::npos) << big.message();
  // A run file of 2.1 million small values is refused by its count, whatever it would have held.
  std::string text = sample.dump();
  text.pop_back();
  text += ",\"padding\":[0";
  for (int i = 0; i < 2'100'000; ++i)
    text += ",0";
  text += "]}";
  auto run = runFromText(text);
  ASSERT_FALSE(run.isOk());
  EXPECT_NE(run.status().message().find("more than the 2000000 JSON values allowed"), std::string::npos)
      << run.status().message();
}

// A fingerprint lists each GPU once: a UUID or an ordinal given twice is refused with the path of the second.
TEST(RunReader, EachGpuIsListedOnce) {
  json doc = loadSample();
  ASSERT_GE(doc["fingerprint"]["gpus"].size(), 2u);
  doc["fingerprint"]["gpus"][1]["uuid"] = doc["fingerprint"]["gpus"][0]["uuid"];
  auto dup = fromJson(doc);
  ASSERT_FALSE(dup.isOk());
  EXPECT_NE(dup.status().message().find("$.fingerprint.gpus[1].uuid: "), std::string::npos) << dup.status().message();
  json ord = loadSample();
  ord["fingerprint"]["gpus"][1]["ordinal"] = ord["fingerprint"]["gpus"][0]["ordinal"];
  auto twice = fromJson(ord);
  ASSERT_FALSE(twice.isOk());
  EXPECT_NE(twice.status().message().find("$.fingerprint.gpus[1].ordinal: "), std::string::npos)
      << twice.status().message();
}

// Stand-ins and injected faults are one typed record in the fingerprint, written only when there are any; the top
// level "injected" of earlier probe files reads into it.
TEST(RunReader, InjectionIsTypedAndReadFromEarlierFilesToo) {
  json doc = loadSample();
  doc["fingerprint"]["injected"] = {{"fault", "copy_slow:percent=50"}, {"nvml", "/x/libpeerlab_fake_nvml.so"}};
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run run, fromJson(doc));
  EXPECT_EQ(run.fingerprint.injected.fault, "copy_slow:percent=50");
  EXPECT_EQ(run.fingerprint.injected.describe(),
            "fault copy_slow:percent=50, stand-in NVML /x/libpeerlab_fake_nvml.so");
  EXPECT_EQ(toJson(run)["fingerprint"]["injected"], doc["fingerprint"]["injected"]);
  json old = loadSample();
  old["injected"] = {{"probe_inject", "corrupt:ce_write:0:1"}, {"faults", 1}, {"worker", "/x/standin"}, {"note", "n"}};
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run legacy, fromJson(old));
  EXPECT_EQ(legacy.fingerprint.injected.probe_inject, "corrupt:ce_write:0:1");
  EXPECT_EQ(legacy.fingerprint.injected.probe_worker, "/x/standin");
  EXPECT_FALSE(toJson(legacy).contains("injected")) << "one home: the fingerprint's";
  PEERLAB_ASSERT_OK_AND_ASSIGN(report::Run plain, fromJson(loadSample()));
  EXPECT_FALSE(plain.fingerprint.injected.any());
  EXPECT_FALSE(toJson(plain)["fingerprint"].contains("injected"));
  json wrong = loadSample();
  wrong["fingerprint"]["injected"] = {{"fault", 7}};
  EXPECT_FALSE(fromJson(wrong).isOk());
}

TEST(RunReader, ControlCharactersAreRemoved) {
  json doc = loadSample();
  doc["results"][0]["impl"] = std::string("peerlab\x1b[31m.probe") + "\xc2\x9b" + "2J";
  doc["fingerprint"]["hostname"] = "host\x07";
  auto run = fromJson(doc);
  ASSERT_TRUE(run.isOk()) << run.status().toString();
  EXPECT_EQ(run->results[0].impl, "peerlab[31m.probe2J");
  EXPECT_EQ(run->fingerprint.hostname, "host");
  EXPECT_EQ(stripControl("a\tb\nc\x7f"), "abc");
}

TEST(GbenchImport, ReadsLabelsCountersAndSkips) {
  json gb = json::parse(R"({
    "context": {},
    "benchmarks": [
      {"name": "BM_Zcopy/get/0->1/bytes:8", "run_type": "iteration", "repetitions": 1, "iterations": 1,
       "real_time": 3.2, "label": "suite=zcopy;impl=peerlab.get;name=uni;src=0;dst=1;ranks=2;bytes=8",
       "bytes": 8, "time_us": 3.2, "algbw_gbps": 0.0025, "busbw_gbps": 0.0025, "wrong": 0, "sms": 0},
      {"name": "BM_A2A/torch", "run_type": "iteration", "repetitions": 1, "error_occurred": true,
       "error_message": "skipped: torch missing [suite=alltoallv;impl=torch.symm_mem;name=uniform;ranks=4;bytes=65536]"},
      {"name": "BM_Other", "run_type": "iteration", "repetitions": 1, "real_time": 1.0},
      {"name": "BM_Rep", "run_type": "iteration", "repetitions": 3, "label": "suite=peer_copy;impl=peerlab.ce;name=uni"},
      {"name": "BM_Rep_median", "run_type": "aggregate", "aggregate_name": "median", "repetitions": 3,
       "label": "suite=peer_copy;impl=peerlab.ce;name=uni;src=1;dst=0;ranks=1", "time_us": 10, "bytes": 4096}
    ]})");
  auto rows = resultsFromGbench(gb);
  ASSERT_TRUE(rows.isOk()) << rows.status().toString();
  ASSERT_EQ(rows->size(), 3u);
  const Result& get = (*rows)[0];
  EXPECT_EQ(get.suite, "zcopy");
  EXPECT_EQ(get.impl, "peerlab.get");
  EXPECT_EQ(*get.src, 0);
  EXPECT_EQ(get.ranks, 2);
  EXPECT_EQ(*get.time_us, 3.2);
  EXPECT_EQ(get.extra["sms"], 0);
  EXPECT_EQ(get.status, "ok");
  const Result& skipped = (*rows)[1];
  EXPECT_EQ(skipped.impl, "torch.symm_mem");
  EXPECT_EQ(skipped.status, "skipped: torch missing");
  EXPECT_EQ(*skipped.bytes, 65536);
  EXPECT_FALSE(skipped.time_us.has_value());
  EXPECT_EQ(*(*rows)[2].time_us, 10);
  EXPECT_FALSE(resultsFromGbench(json::object()).isOk());
}

// With --benchmark_repetitions, each repetition's time becomes a sample of the median row (samples_us).
TEST(GbenchImport, RepetitionsBecomeSamples) {
  json gb = json::parse(R"({
    "benchmarks": [
      {"name": "BM_Rep/a", "run_name": "BM_Rep/a", "run_type": "iteration", "repetitions": 3, "repetition_index": 0,
       "time_us": 10.5, "label": "suite=peer_copy;impl=peerlab.ce;name=uni;src=0;dst=1"},
      {"name": "BM_Rep/a", "run_name": "BM_Rep/a", "run_type": "iteration", "repetitions": 3, "repetition_index": 1,
       "time_us": 10.1, "label": "suite=peer_copy;impl=peerlab.ce;name=uni;src=0;dst=1"},
      {"name": "BM_Rep/a", "run_name": "BM_Rep/a", "run_type": "iteration", "repetitions": 3, "repetition_index": 2,
       "time_us": 10.3, "label": "suite=peer_copy;impl=peerlab.ce;name=uni;src=0;dst=1"},
      {"name": "BM_Rep/a_mean", "run_name": "BM_Rep/a", "run_type": "aggregate", "aggregate_name": "mean",
       "repetitions": 3, "time_us": 10.3, "label": "suite=peer_copy;impl=peerlab.ce;name=uni;src=0;dst=1"},
      {"name": "BM_Rep/a_median", "run_name": "BM_Rep/a", "run_type": "aggregate", "aggregate_name": "median",
       "repetitions": 3, "time_us": 10.3, "label": "suite=peer_copy;impl=peerlab.ce;name=uni;src=0;dst=1"}
    ]})");
  auto rows = resultsFromGbench(gb);
  ASSERT_TRUE(rows.isOk()) << rows.status().toString();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].extra["samples_us"], json::array({10.5, 10.1, 10.3}));
  EXPECT_EQ(*(*rows)[0].time_us, 10.3);
}

TEST(GbenchImport, HostCopyRowsCarryTheirNumaNode) {
  json gb = json::parse(R"({
    "context": {},
    "benchmarks": [
      {"name": "BM_HostCopy/peerlab.ce/h2d/gpu:0/numa:local/bytes:268435456", "run_type": "iteration",
       "repetitions": 1, "label": "suite=host_copy;impl=peerlab.ce;name=h2d;src=0;ranks=1;bytes=268435456",
       "bytes": 268435456, "time_us": 4950, "algbw_gbps": 54.2, "busbw_gbps": 54.2, "wrong": 0, "numa": 1,
       "vs_plain": 0.995}
    ]})");
  auto rows = resultsFromGbench(gb);
  ASSERT_TRUE(rows.isOk()) << rows.status().toString();
  ASSERT_EQ(rows->size(), 1u);
  const Result& h2d = (*rows)[0];
  EXPECT_EQ(h2d.suite, "host_copy");
  EXPECT_EQ(*h2d.src, 0);
  EXPECT_FALSE(h2d.dst.has_value());
  ASSERT_TRUE(h2d.numa.has_value());
  EXPECT_EQ(*h2d.numa, 1);
  EXPECT_FALSE(h2d.extra.contains("numa"));
  EXPECT_EQ(h2d.extra["vs_plain"], 0.995);

  // The run file keeps the field; a run without it reads back without one; a wrong type names the path.
  report::Run run = newRun();
  run.results = {h2d};
  const json doc = toJson(run);
  EXPECT_EQ(doc["results"][0]["numa"], 1);
  auto back = fromJson(doc);
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_EQ(back->results[0].numa, 1);
  json bad = doc;
  bad["results"][0]["numa"] = "one";
  auto rejected = fromJson(bad);
  ASSERT_FALSE(rejected.isOk());
  EXPECT_NE(rejected.status().message().find("numa"), std::string::npos) << rejected.status().toString();
  Result plain = h2d;
  plain.numa.reset();
  EXPECT_FALSE(toJson(plain).contains("numa"));
}

}  // namespace
}  // namespace peerlab::report

namespace peerlab::report {
namespace {

// A key twice in one object: the parser would keep the last silently, so the one reader refuses it, naming where.
TEST(RunSchema, DuplicateKeysAreRefusedWithThePath) {
  const std::string sample = loadSample().dump();
  const std::string dupResults = "{\"results\": []," + sample.substr(1);
  auto r = runFromText(dupResults);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().message(), "$: the key \"results\" appears twice in one object") << r.status().message();
  // Deeper: a result naming its status twice.
  nlohmann::json doc = loadSample();
  std::string text = doc.dump();
  const size_t at = text.find("\"status\":");
  ASSERT_NE(at, std::string::npos);
  text.insert(at, "\"status\":\"ok\",");
  auto deep = runFromText(text);
  ASSERT_FALSE(deep.isOk());
  EXPECT_NE(deep.status().message().find("$.results[0]: the key \"status\" appears twice"), std::string::npos)
      << deep.status().message();
  // Through the file reader: one line naming the file.
  const std::string path = writeTemp(dupResults);
  auto file = readRun(path);
  ASSERT_FALSE(file.isOk());
  EXPECT_EQ(file.status().message(), path + ": $: the key \"results\" appears twice in one object");
  std::filesystem::remove(path);
  // The same key in two objects is fine, and so is every committed run file.
  PEERLAB_EXPECT_OK(runFromText(loadSample().dump()).status());
  // A key repeated inside an array's objects, in nested objects and arrays of arrays: the paths stay right.
  auto nested = runFromText(R"({"a":[{"x":1},{"x":2,"y":[[1],[2]],"z":{"k":1,"k":2}}]})");
  ASSERT_FALSE(nested.isOk());
  EXPECT_EQ(nested.status().message(), "$.a[1].z: the key \"k\" appears twice in one object");
}

}  // namespace
}  // namespace peerlab::report
