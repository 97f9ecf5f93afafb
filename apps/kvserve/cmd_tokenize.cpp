// kvserve tokenize: token ids of a text, space-separated (reads only the tokenizer, so
// vocabulary-only GGUF files work too).
#include <cstdio>

#include "commands.h"
#include "tokenizer/utf8.h"

namespace kvserve::cli {

Runner add_tokenize(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "print the token ids of a text");
  struct Opts {
    std::string model, prompt;
    bool no_bos = false;
    bool parse_special = false;
    bool pieces = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-m,--model", o->model, "GGUF model or vocabulary file")->required();
  cmd->add_option("-p,--prompt", o->prompt, "text")->required();
  cmd->add_flag("--no-bos", o->no_bos, "do not add BOS/EOS");
  cmd->add_flag("--parse-special", o->parse_special, "turn special-token text such as <s> into those tokens");
  cmd->add_flag("--pieces", o->pieces, "print id:'piece' pairs, one per line");

  return [o]() -> int {
    auto file = GgufFile::open(o->model);
    if (!file.ok()) {
      std::fprintf(stderr, "error: %s\n", file.status().message().c_str());
      return 1;
    }
    auto tok = Tokenizer::from_gguf(**file);
    if (!tok.ok()) {
      std::fprintf(stderr, "error: %s\n", tok.status().message().c_str());
      return 1;
    }
    std::vector<int32_t> ids = (*tok)->encode(o->prompt, !o->no_bos, o->parse_special);
    if (o->pieces) {
      // Special tokens as their text (<s>); newlines, quotes and partial UTF-8 escaped, so each
      // piece stays on its line and reads back unambiguously.
      for (int32_t id : ids)
        std::printf("%d:'%s'\n", id, utf8::escape_for_display((*tok)->token_to_piece(id, true)).c_str());
      return 0;
    }
    for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
    std::printf("\n");
    return 0;
  };
}

KVS_REGISTER_COMMAND(add_tokenize, 60);

}  // namespace kvserve::cli
