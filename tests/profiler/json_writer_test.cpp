// The streaming JSON writer: escaping, structure, and strict parsing of what it writes.
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profiler/json_writer.h"

namespace sightline::profiler {
namespace {

std::string json_quoted(std::string_view text) {
  std::string out;
  JsonWriter::append_quoted(out, text);
  return out;
}

TEST(profiler_json_writer, escapes_quotes_backslashes_and_control_characters) {
  EXPECT_EQ(json_quoted("plain"), "\"plain\"");
  EXPECT_EQ(json_quoted("say \"hi\""), "\"say \\\"hi\\\"\"");
  EXPECT_EQ(json_quoted("C:\\path"), "\"C:\\\\path\"");
  EXPECT_EQ(json_quoted("a\nb\tc\rd\be\ff"), "\"a\\nb\\tc\\rd\\be\\ff\"");
  EXPECT_EQ(json_quoted(std::string("nul\0x", 5)), "\"nul\\u0000x\"");
  EXPECT_EQ(json_quoted("\x1f\x7f"), "\"\\u001f\\u007f\"");
}

TEST(profiler_json_writer, utf8_passes_through_and_invalid_bytes_are_replaced) {
  EXPECT_EQ(json_quoted("µs → 東京 🚀"), "\"µs → 東京 🚀\"");
  EXPECT_EQ(json_quoted("bad\xff byte"), "\"bad\\ufffd byte\"");
  EXPECT_EQ(json_quoted("cut \xe6\x9d"), "\"cut \\ufffd\\ufffd\"");
  EXPECT_EQ(json_quoted("overlong \xc0\xaf"), "\"overlong \\ufffd\\ufffd\"");
  EXPECT_EQ(json_quoted("surrogate \xed\xa0\x80"), "\"surrogate \\ufffd\\ufffd\\ufffd\"");
}

TEST(profiler_json_writer, writes_nested_documents_that_parse_strictly) {
  std::string text;
  JsonWriter json([&](std::string_view piece) { text += piece; }, 8);  // tiny threshold: many pieces
  const std::string tricky = std::string("\"\\\n\x01 ok \xc3\xa9 \xff", 12);
  json.begin_object();
  json.key("name").value(tricky);
  json.key("ints")
      .begin_array()
      .value(std::int64_t{-3})
      .value(std::uint64_t{18446744073709551615ull})
      .end_array();
  json.key("real").value(0.25).key("nan").value(std::numeric_limits<double>::quiet_NaN());
  json.key("flags").begin_array(true).value(true).value(false).null().end_array();
  json.key("ts").fixed3(1234567).key("small").fixed3(5).key("neg").fixed3(-1500);
  json.key("empty").begin_object().end_object();
  json.key(tricky).value("key escaped too");
  json.end_object();
  json.flush();
  EXPECT_TRUE(json.complete());

  const nlohmann::json parsed = nlohmann::json::parse(text);  // throws on any invalid JSON
  EXPECT_EQ(parsed["name"], "\"\\\n\x01 ok \xc3\xa9 \xef\xbf\xbd");
  EXPECT_EQ(parsed["ints"][0], -3);
  EXPECT_EQ(parsed["ints"][1].get<std::uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(parsed["real"], 0.25);
  EXPECT_TRUE(parsed["nan"].is_null());
  EXPECT_EQ(parsed["flags"].size(), 3u);
  EXPECT_EQ(parsed["empty"].size(), 0u);
  EXPECT_NE(text.find("\"ts\":1234.567,\"small\":0.005,\"neg\":-1.500"), std::string::npos);
  EXPECT_NE(text.find("[\ntrue,\nfalse,\nnull\n]"), std::string::npos);
}

TEST(profiler_json_writer, output_reaches_the_sink_in_pieces) {
  std::vector<std::size_t> pieces;
  JsonWriter json([&](std::string_view piece) { pieces.push_back(piece.size()); }, 64);
  json.begin_array();
  for (int i = 0; i < 100; ++i) json.begin_object().key("i").value(i).end_object();
  json.end_array();
  json.flush();
  EXPECT_GT(pieces.size(), 5u);
}

}  // namespace
}  // namespace sightline::profiler
