#include "server/chat_template.h"

#include <cctype>
#include <utility>

namespace kvserve::server {
namespace {

bool has(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

// Builds the prompt text and records where the messages' own text lies in it.
class Prompt {
 public:
  Prompt& markup(const std::string& s) {
    out_.text += s;
    return *this;
  }
  Prompt& content(const std::string& s) {
    if (s.empty()) return *this;
    const auto begin = uint32_t(out_.text.size());
    out_.text += s;
    if (!out_.content.empty() && out_.content.back().second == begin)
      out_.content.back().second = uint32_t(out_.text.size());  // adjacent: one range
    else
      out_.content.emplace_back(begin, uint32_t(out_.text.size()));
    return *this;
  }
  RenderedChat done() { return std::move(out_); }

 private:
  RenderedChat out_;
};

RenderedChat render_chatml(const std::vector<ChatMessage>& ms) {
  Prompt p;
  for (const auto& m : ms) p.markup("<|im_start|>" + m.role + "\n").content(m.content).markup("<|im_end|>\n");
  return p.markup("<|im_start|>assistant\n").done();
}

RenderedChat render_llama3(const std::vector<ChatMessage>& ms) {
  Prompt p;
  for (const auto& m : ms)
    p.markup("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n")
        .content(m.content)
        .markup("<|eot_id|>");
  return p.markup("<|start_header_id|>assistant<|end_header_id|>\n\n").done();
}

// Llama-2 and Mistral share [INST] turns; Llama-2 wraps the system prompt in <<SYS>> inside
// the first user turn, Mistral prepends it to the first user message. Every turn after the
// first starts with a literal <s> (the first one gets BOS from the tokenizer).
RenderedChat render_inst(const std::vector<ChatMessage>& ms, bool llama2) {
  std::string system;
  Prompt p;
  bool first_turn = true;
  for (const auto& m : ms) {
    if (m.role == "system") {
      system += (system.empty() ? "" : "\n") + m.content;
    } else if (m.role == "assistant") {
      p.markup(llama2 ? " " : "").content(m.content).markup("</s>");
    } else {
      if (!first_turn && llama2) p.markup("<s>");
      p.markup("[INST] ");
      if (!system.empty()) {
        if (llama2)
          p.markup("<<SYS>>\n").content(system).markup("\n<</SYS>>\n\n");
        else
          p.content(system).markup("\n\n");
        system.clear();
      }
      p.content(m.content).markup(" [/INST]");
      first_turn = false;
    }
  }
  return p.done();
}

RenderedChat render_tagged(const std::vector<ChatMessage>& ms, const char* end) {
  Prompt p;
  for (const auto& m : ms)
    p.markup("<|" + m.role + "|>\n").content(m.content).markup(std::string(end) + "\n");
  return p.markup("<|assistant|>\n").done();
}

RenderedChat render_plain(const std::vector<ChatMessage>& ms) {
  Prompt p;
  for (const auto& m : ms) {
    std::string role = m.role;
    if (!role.empty()) role[0] = char(std::toupper(static_cast<unsigned char>(role[0])));
    p.markup(role + ": ").content(m.content).markup("\n\n");
  }
  return p.markup("Assistant:").done();
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
  return render_chat_parts(f, messages).text;
}

RenderedChat render_chat_parts(ChatFamily f, const std::vector<ChatMessage>& messages) {
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
