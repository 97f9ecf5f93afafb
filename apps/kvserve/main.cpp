// kvserve: one binary, one subcommand per task (see docs/cli.md).
#include <algorithm>
#include <cstdio>

#include "commands.h"
#include "util/log.h"

int main(int argc, char** argv) {
  CLI::App app{"kvserve: an LLM inference server built around its KV cache"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvserve 0.1.0");
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "debug, info, warn, error, off")->capture_default_str();

  // Each add_* creates its subcommand; exactly one is parsed (require_subcommand(1)).
  std::vector<kvserve::cli::Runner> runners;
  for (auto factory : kvserve::cli::registered_commands()) runners.push_back(factory(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version print and succeed; anything else is bad command-line input: one
    // `error:` line and exit status 2, as every subcommand's own checks (docs/cli.md).
    if (e.get_exit_code() == int(CLI::ExitCodes::Success)) return app.exit(e);
    std::string what = e.what();
    const auto subs = app.get_subcommands([](CLI::App*) { return true; });
    const bool known = argc > 1 && std::any_of(subs.begin(), subs.end(),
                                               [&](CLI::App* sub) { return sub->get_name() == argv[1]; });
    if (argc > 1 && argv[1][0] != '-' && !known) {
      what = std::string("unknown subcommand '") + argv[1] + "' (one of:";
      for (const CLI::App* sub : subs) what += " " + sub->get_name();
      what += ")";
    }
    std::fprintf(stderr, "error: %s\nRun with --help for more information.\n", what.c_str());
    return 2;
  }
  kvserve::LogLevel lvl;
  if (!kvserve::parse_log_level(log_level, &lvl)) {
    std::fprintf(stderr, "error: --log-level must be one of debug, info, warn, error, off\n");
    return 2;
  }
  kvserve::set_log_level(lvl);
  auto subs = app.get_subcommands([](CLI::App*) { return true; });  // creation order, like `runners`
  for (size_t i = 0; i < subs.size() && i < runners.size(); ++i)
    if (subs[i]->parsed()) return runners[i]();
  return 2;
}
