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

// Elements formatted elsewhere are handed to the sink as they are, after what was buffered; the first
// element's separator is dropped; with until_next_return the writer keeps each text until the sink's
// next call has returned, and gives back one the sink is done with.
TEST(profiler_json_writer, handed_over_elements_are_the_document_of_the_calls) {
  auto elements = [](JsonWriter& json, int first, int last) {
    JsonWriter::Text text;
    for (int i = first; i < last; ++i) {
      char* p = JsonWriter::write_literal(text.room(64), json.element_separator());
      p = JsonWriter::write_integer(p, std::int64_t{i});
      text.commit(p);
    }
    return text;
  };
  for (const auto pieces : {JsonWriter::Pieces::until_return, JsonWriter::Pieces::until_next_return}) {
    std::string out;
    std::vector<std::string_view> handed;
    JsonWriter json(
        [&](std::string_view piece) {
          out += piece;
          handed.push_back(piece);
        },
        1 << 16, pieces);
    json.begin_object().key("a").begin_array(true);
    JsonWriter::Text back = json.hand_over_elements(elements(json, 0, 3));  // no element before: no separator
    EXPECT_EQ(back.view(), "");
    json.value(std::int64_t{3});
    back = json.hand_over_elements(elements(json, 4, 6));
    if (pieces == JsonWriter::Pieces::until_next_return) {
      EXPECT_EQ(handed.back(), ",\n4,\n5");  // still held by the writer: the sink may read it
    }
    json.end_array().end_object();
    json.flush();
    EXPECT_EQ(out, "{\"a\":[\n0,\n1,\n2,\n3,\n4,\n5\n]}");
    EXPECT_TRUE(nlohmann::json::accept(out));
  }
}

}  // namespace
}  // namespace sightline::profiler
