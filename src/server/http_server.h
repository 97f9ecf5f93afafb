// `kvserve serve`: binds the port, loads the model in the background (so /health answers
// "loading" meanwhile), serves HTTP until SIGTERM/SIGINT, then drains and exits.
#pragma once

#include "server/config.h"

namespace kvserve::server {

// Runs the server to completion; returns the process exit code (0 after a graceful
// shutdown, 1 when the port cannot be bound or the model does not load).
int run_server(const ServerConfig& cfg);

}  // namespace kvserve::server
