#include "server/chat_template.h"

#include <cctype>

namespace kvserve::server {
namespace {

bool has(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

std::string render_chatml(const std::vector<ChatMessage>& ms) {
  std::string out;
  for (const auto& m : ms) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  return out + "<|im_start|>assistant\n";
}

std::string render_llama3(const std::vector<ChatMessage>& ms) {
  std::string out;
  for (const auto& m : ms) out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
  return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

// Llama-2 and Mistral share [INST] turns; Llama-2 wraps the system prompt in <<SYS>> inside
// the first user turn, Mistral prepends it to the first user message. Every turn after the
// first starts with a literal <s> (the first one gets BOS from the tokenizer).
std::string render_inst(const std::vector<ChatMessage>& ms, bool llama2) {
  std::string system, out;
  bool first_turn = true;
  for (const auto& m : ms) {
    if (m.role == "system") {
      system += (system.empty() ? "" : "\n") + m.content;
    } else if (m.role == "assistant") {
      out += (llama2 ? " " : "") + m.content + "</s>";
    } else {
      std::string content = m.content;
      if (!system.empty()) {
        content = llama2 ? "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content : system + "\n\n" + content;
        system.clear();
      }
      if (!first_turn && llama2) out += "<s>";
      out += "[INST] " + content + " [/INST]";
      first_turn = false;
    }
  }
  return out;
}

std::string render_tagged(const std::vector<ChatMessage>& ms, const char* end) {
  std::string out;
  for (const auto& m : ms) out += "<|" + m.role + "|>\n" + m.content + end + "\n";
  return out + "<|assistant|>\n";
}

std::string render_plain(const std::vector<ChatMessage>& ms) {
  std::string out;
  for (const auto& m : ms) {
    std::string role = m.role;
    if (!role.empty()) role[0] = char(std::toupper(static_cast<unsigned char>(role[0])));
    out += role + ": " + m.content + "\n\n";
  }
  return out + "Assistant:";
}

}  // namespace

const char* chat_family_name(ChatFamily f) {
  switch (f) {
    case ChatFamily::kChatML: return "chatml";
    case ChatFamily::kLlama2: return "llama2";
    case ChatFamily::kLlama3: return "llama3";
    case ChatFamily::kMistral: return "mistral";
    case ChatFamily::kZephyr: return "zephyr";
    case ChatFamily::kPhi3: return "phi3";
    default: return "plain";
  }
}

bool parse_chat_family(const std::string& name, ChatFamily* out) {
  for (ChatFamily f : {ChatFamily::kPlain, ChatFamily::kChatML, ChatFamily::kLlama2, ChatFamily::kLlama3,
                       ChatFamily::kMistral, ChatFamily::kZephyr, ChatFamily::kPhi3}) {
    if (name == chat_family_name(f)) {
      *out = f;
      return true;
    }
  }
  return false;
}

ChatFamily detect_chat_family(const std::string& t) {
  if (has(t, "<|im_start|>")) return ChatFamily::kChatML;
  if (has(t, "<|start_header_id|>")) return ChatFamily::kLlama3;
  if (has(t, "[INST]")) return has(t, "<<SYS>>") ? ChatFamily::kLlama2 : ChatFamily::kMistral;
  if (has(t, "<|assistant|>") && has(t, "<|end|>")) return ChatFamily::kPhi3;
  if (has(t, "<|user|>")) return ChatFamily::kZephyr;
  return ChatFamily::kPlain;
}

std::string render_chat(ChatFamily f, const std::vector<ChatMessage>& messages) {
  switch (f) {
    case ChatFamily::kChatML: return render_chatml(messages);
    case ChatFamily::kLlama3: return render_llama3(messages);
    case ChatFamily::kLlama2: return render_inst(messages, true);
    case ChatFamily::kMistral: return render_inst(messages, false);
    case ChatFamily::kZephyr: return render_tagged(messages, "</s>");
    case ChatFamily::kPhi3: return render_tagged(messages, "<|end|>");
    default: return render_plain(messages);
  }
}

}  // namespace kvserve::server
