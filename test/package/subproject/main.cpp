// Uses colock's headers, its library and its version: built as a part of this project
// (add_subdirectory, FetchContent), and with pkg-config by run_consumer_test.cmake.
#include <colock/redis/config.hpp>
#include <colock/resp3/request.hpp>
#include <colock/version.hpp>

#include <iostream>

int main() {
    colock::resp3::request req;
    req.push("PING");
    auto const cfg = colock::redis::config::from_url("redis://127.0.0.1:6380/1");
    bool const ok = req.commands() == 1 && cfg.port == 6380 && cfg.database == 1;
    std::cout << "colock " << COLOCK_VERSION_STRING << ": " << (ok ? "ok" : "FAILED") << "\n";
    return ok ? 0 : 1;
}
