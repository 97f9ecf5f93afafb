#include "server/chat_template.h"

#include <gtest/gtest.h>

namespace kvserve::server {
namespace {

const std::vector<ChatMessage> kConv = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};

TEST(ChatTemplate, DetectsFamiliesFromMarkers) {
  EXPECT_EQ(detect_chat_family("{% for m in messages %}<|im_start|>{{m.role}}"), ChatFamily::kChatML);
  EXPECT_EQ(detect_chat_family("<|start_header_id|>' + message['role'] + '<|end_header_id|>"), ChatFamily::kLlama3);
  EXPECT_EQ(detect_chat_family("[INST] <<SYS>>\\n' + system + '\\n<</SYS>>"), ChatFamily::kLlama2);
  EXPECT_EQ(detect_chat_family("{{ '[INST] ' + message['content'] + ' [/INST]' }}"), ChatFamily::kMistral);
  EXPECT_EQ(detect_chat_family("<|user|>\\n{{content}}<|end|>\\n<|assistant|>"), ChatFamily::kPhi3);
  EXPECT_EQ(detect_chat_family("<|user|>\\n{{content}}</s>\\n<|assistant|>"), ChatFamily::kZephyr);
  EXPECT_EQ(detect_chat_family(""), ChatFamily::kPlain);
}

TEST(ChatTemplate, Names) {
  ChatFamily f;
  for (const char* n : {"chatml", "llama2", "llama3", "mistral", "zephyr", "phi3", "plain"}) {
    ASSERT_TRUE(parse_chat_family(n, &f)) << n;
    EXPECT_STREQ(chat_family_name(f), n);
  }
  EXPECT_FALSE(parse_chat_family("auto", &f));
}

// Every family: the content ranges cover exactly the messages' text, in order, and nothing of
// the markup (so the markup is parsed for special tokens and the content never is).
TEST(ChatTemplate, ContentRangesCoverTheMessagesOnly) {
  const std::vector<ChatMessage> conv = {
      {"system", "S1"}, {"system", "S2"}, {"user", "u<|im_end|>1"}, {"assistant", "a1"}, {"user", "u2"}};
  for (ChatFamily f : {ChatFamily::kChatML, ChatFamily::kLlama2, ChatFamily::kLlama3, ChatFamily::kMistral,
                       ChatFamily::kZephyr, ChatFamily::kPhi3, ChatFamily::kPlain}) {
    SCOPED_TRACE(chat_family_name(f));
    const RenderedChat r = render_chat_parts(f, conv);
    EXPECT_EQ(r.text, render_chat(f, conv));
    std::string covered;
    uint32_t last_end = 0;
    for (const auto& [b, e] : r.content) {
      ASSERT_LT(b, e);
      ASSERT_LE(last_end, b);
      ASSERT_LE(e, r.text.size());
      covered += r.text.substr(b, e - b) + "|";
      last_end = e;
    }
    // The [INST] families merge the system messages ("S1\nS2") into the first user turn.
    const bool inst = f == ChatFamily::kLlama2 || f == ChatFamily::kMistral;
    EXPECT_EQ(covered, inst ? "S1\nS2|u<|im_end|>1|a1|u2|" : "S1|S2|u<|im_end|>1|a1|u2|");
  }
}

TEST(ChatTemplate, ChatML) {
  EXPECT_EQ(render_chat(ChatFamily::kChatML, kConv),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3) {
  EXPECT_EQ(render_chat(ChatFamily::kLlama3, {{"user", "Hi"}}),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2PutsSystemInsideFirstTurn) {
  EXPECT_EQ(render_chat(ChatFamily::kLlama2, kConv),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello.</s><s>[INST] Bye [/INST]");
}

TEST(ChatTemplate, MistralPrependsSystem) {
  EXPECT_EQ(render_chat(ChatFamily::kMistral, kConv), "[INST] Be brief.\n\nHi [/INST]Hello.</s>[INST] Bye [/INST]");
}

TEST(ChatTemplate, ZephyrAndPhi3) {
  EXPECT_EQ(render_chat(ChatFamily::kZephyr, {{"user", "Hi"}}), "<|user|>\nHi</s>\n<|assistant|>\n");
  EXPECT_EQ(render_chat(ChatFamily::kPhi3, {{"system", "S"}, {"user", "Hi"}}),
            "<|system|>\nS<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplate, PlainFallback) {
  EXPECT_EQ(render_chat(ChatFamily::kPlain, {{"system", "S"}, {"user", "Hi"}}), "System: S\n\nUser: Hi\n\nAssistant:");
}

}  // namespace
}  // namespace kvserve::server
