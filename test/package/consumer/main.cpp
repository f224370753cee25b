// Uses colock only through its installed headers and library: builds a request, parses a URL
// and makes a connection (without connecting, so no server is needed).
#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock/resp3/request.hpp>
#include <colock/version.hpp>

#include <boost/asio/io_context.hpp>

#include <iostream>
#include <string_view>

int run_with_io_service(); // deprecated_asio.cpp

int main() {
    colock::resp3::request req;
    req.push("SET", "colock:consumer", 42);
    req.push("GET", "colock:consumer");

    auto const cfg = colock::redis::config::from_url("redis://127.0.0.1:6379/2");

    boost::asio::io_context ioc;
    colock::redis::connection conn{ioc.get_executor(), cfg};

    std::cout << "request: " << req.commands() << " commands, " << req.payload().size()
              << " bytes\n"
              << "config: " << cfg.to_redacted_url() << " (database " << cfg.database << ")\n"
              << "connection: " << (conn.is_connected() ? "connected" : "not connected") << "\n";

    std::cout << "version: headers " << COLOCK_VERSION_STRING << ", package " << PACKAGE_VERSION
              << "\n";
    bool const ok = req.commands() == 2 && req.expected_replies() == 2 && cfg.port == 6379 &&
                    cfg.database == 2 && !conn.is_connected() &&
                    std::string_view(COLOCK_VERSION_STRING) == PACKAGE_VERSION &&
                    run_with_io_service() == 0;
    std::cout << "colock consumer: " << (ok ? "ok" : "FAILED") << "\n";
    return ok ? 0 : 1;
}
