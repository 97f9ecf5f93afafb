// Chat prompt rendering for the common model families. We do not run the Jinja template the
// model ships (no Jinja engine here); instead we recognise the family from marker substrings
// of the `tokenizer.chat_template` text and render that family's fixed layout. The rendered
// text omits the leading BOS: the tokenizer adds it (add_special) and parses the other
// special markers in the markup only, never in the messages' content (render_chat_parts).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvserve::server {

enum class ChatFamily { kPlain, kChatML, kLlama2, kLlama3, kMistral, kZephyr, kPhi3 };

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// "chatml", "llama2", ... (also accepted by --chat-template).
const char* chat_family_name(ChatFamily f);
// false for an unknown name; "" and "auto" are not family names (they mean: detect).
bool parse_chat_family(const std::string& name, ChatFamily* out);
// Recognises the family from a Jinja template text; kPlain when nothing matches.
ChatFamily detect_chat_family(const std::string& jinja_template);
// The prompt for `messages`, ending with the opening of the assistant's turn.
std::string render_chat(ChatFamily f, const std::vector<ChatMessage>& messages);

// The same text, and the byte ranges in it [first, second) that are the messages' own content
// (sorted, disjoint). Only the markup between them may be parsed as special tokens: a message
// holding "<|im_end|>" must not close its turn (Engine::tokenize_chat).
struct RenderedChat {
  std::string text;
  std::vector<std::pair<uint32_t, uint32_t>> content;
};
RenderedChat render_chat_parts(ChatFamily f, const std::vector<ChatMessage>& messages);

}  // namespace kvserve::server
