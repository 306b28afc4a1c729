// read_file, json_parse and typed JSON field access: the one way input files are read.
#include "runtime/io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "runtime/core/check.h"

namespace remat {

namespace {
// Closes a descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}
}  // namespace

std::string read_file(const std::string& path, const std::string& what, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; a regular file ignores the flag.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) REMAT_USER_ERROR(path << ": cannot open " << what << ": " << std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    REMAT_USER_ERROR(path << ": cannot read " << what << ": " << std::strerror(errno));
  if (S_ISDIR(st.st_mode)) REMAT_USER_ERROR(path << ": is a directory, expected a " << what);
  if (!S_ISREG(st.st_mode))
    REMAT_USER_ERROR(path << ": is " << file_kind(st.st_mode) << ", not a regular file; expected a "
                          << what << " (a pipe or device could block or never end)");
  if (st.st_size > max_bytes)
    REMAT_USER_ERROR(path << ": " << what << " of " << st.st_size << " bytes is larger than the "
                          << max_bytes << "-byte limit");
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) REMAT_USER_ERROR(path << ": cannot read " << what << ": " << std::strerror(errno));
    if (n == 0) break;
    if (static_cast<int64_t>(out.size()) + n > max_bytes)
      REMAT_USER_ERROR(path << ": " << what << " is larger than the " << max_bytes
                            << "-byte limit");
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

nlohmann::json json_parse(std::string_view text, const std::string& source) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and out_of_range for a number that overflows a double (1e999).
    REMAT_USER_ERROR(source << ": invalid JSON: " << e.what());
  }
}

namespace {
[[noreturn]] void wrong_type(const nlohmann::json& v, const std::string& where, const char* field,
                             const char* expected) {
  REMAT_USER_ERROR(where << ": field '" << field << "': expected " << expected << ", got "
                         << v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}
}  // namespace

const nlohmann::json& json_field(const nlohmann::json& obj, const std::string& where,
                                 const char* field) {
  if (!obj.is_object()) REMAT_USER_ERROR(where << ": expected a JSON object, got " << obj.type_name());
  auto it = obj.find(field);
  if (it == obj.end()) REMAT_USER_ERROR(where << ": missing field '" << field << "'");
  return *it;
}

int64_t json_int64(const nlohmann::json& v, const std::string& where, const char* field) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) return v.get<int64_t>();
  } else if (v.is_number_integer()) {
    return v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18)
      return static_cast<int64_t>(d);
  }
  wrong_type(v, where, field, "an integer in int64's range");
}

double json_number(const nlohmann::json& v, const std::string& where, const char* field) {
  if (!v.is_number()) wrong_type(v, where, field, "a number");
  return v.get<double>();
}

std::string json_string(const nlohmann::json& v, const std::string& where, const char* field) {
  if (!v.is_string()) wrong_type(v, where, field, "a string");
  return v.get<std::string>();
}

bool json_bool(const nlohmann::json& v, const std::string& where, const char* field) {
  if (!v.is_boolean()) wrong_type(v, where, field, "true or false");
  return v.get<bool>();
}

void json_reject_unknown_fields(const nlohmann::json& obj, const std::string& where,
                                const std::set<std::string>& known) {
  if (!obj.is_object()) REMAT_USER_ERROR(where << ": expected a JSON object, got " << obj.type_name());
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (known.count(it.key())) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    REMAT_USER_ERROR(where << ": unknown field '" << it.key() << "' (known: " << list << ")");
  }
}

}  // namespace remat
