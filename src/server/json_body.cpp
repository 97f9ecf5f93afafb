#include "server/json_body.h"

namespace kvserve::server {

Expected<nlohmann::json> parse_json_body(const std::string& body) {
  try {
    return nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error
    // while parsing value - invalid literal; last read: '...'"
    std::string why = e.what();
    if (const size_t tag = why.find("] "); why.rfind("[json.exception", 0) == 0 && tag != std::string::npos)
      why.erase(0, tag + 2);
    if (const size_t read = why.find("; last read: "); read != std::string::npos) why.erase(read);
    if (why.rfind("parse error ", 0) == 0) why.erase(0, 12);  // "at line ..."
    constexpr size_t kMaxWhy = 240;
    if (why.size() > kMaxWhy) why = why.substr(0, kMaxWhy) + "...";
    return invalid_argument("body: malformed JSON " + why);
  } catch (const std::exception& e) {
    return invalid_argument(std::string("body: malformed JSON: ") + e.what());
  }
}

}  // namespace kvserve::server
