// Reading input files: a whole file with errors that name it (missing, a directory, too large),
// JSON parsing whose every failure (syntax, a number overflow such as 1e999) names the source,
// and typed field access whose errors name the place and the field.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace remat {

// Text and JSON inputs larger than this are refused (a problem of 100,000 nodes is ~20 MB).
constexpr int64_t kMaxTextFileBytes = int64_t{1} << 30;

// The bytes of `path`. UserError "<path>: ..." naming `what` ("problem file", "checkpoint")
// when it cannot be opened or read, is a directory, or holds more than `max_bytes`.
std::string read_file(const std::string& path, const std::string& what,
                           int64_t max_bytes = kMaxTextFileBytes);

// Parses `text`; any failure is a UserError "<source>: invalid JSON: ...".
nlohmann::json json_parse(std::string_view text, const std::string& source);

// Field access for readers; `where` names the object ("p.json: nodes[3] 'conv1'"). Errors are
// UserErrors "<where>: missing field 'f'" or "<where>: field 'f': expected ..., got <value>".
const nlohmann::json& json_field(const nlohmann::json& obj, const std::string& where,
                                 const char* field);
// An integer (or a float with an integral value) in int64's range.
int64_t json_int64(const nlohmann::json& v, const std::string& where, const char* field);
double json_number(const nlohmann::json& v, const std::string& where, const char* field);
std::string json_string(const nlohmann::json& v, const std::string& where, const char* field);
bool json_bool(const nlohmann::json& v, const std::string& where, const char* field);
// `obj` must be an object whose keys are all in `known` (the error lists them).
void json_reject_unknown_fields(const nlohmann::json& obj, const std::string& where,
                                const std::set<std::string>& known);

}  // namespace remat
