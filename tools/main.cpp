// colock: run a command under a distributed lock, under a semaphore's permit or while leading
// an election, show locks and leaders, end a stuck holder's lease.
// See `colock --help` and docs/tool.md.
#include "child_process.hpp"
#include "cli.hpp"
#include "text.hpp"

#include <colock/locker.hpp>
#include <colock/log.hpp>
#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock/version.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

namespace colock::cli {

namespace {

namespace asio = boost::asio;

// Long enough for a TLS handshake across a data centre, short enough that an unreachable server
// is reported before the user wonders.
constexpr std::chrono::milliseconds connect_timeout{3000};

asio::awaitable<int> run(options o, redis::config cfg) {
    redis::connection conn{co_await asio::this_coro::executor, std::move(cfg)};
    std::exception_ptr failure;
    int code = exit_failure;
    try {
        co_await conn.co_connect(); // fails fast, naming the endpoint, when nobody answers
        locker lk{conn, o.prefix};
        switch (o.cmd) {
        case subcommand::exec:
            code = co_await run_exec(o, conn, lk);
            break;
        case subcommand::status:
            code = co_await run_status(o, lk);
            break;
        case subcommand::list:
            code = co_await run_list(o, conn, lk);
            break;
        case subcommand::unlock:
            code = co_await run_unlock(o, lk);
            break;
        case subcommand::elect:
            code = co_await run_elect(o, conn, lk);
            break;
        case subcommand::leader:
            code = co_await run_leader(o, lk);
            break;
        case subcommand::resign:
            code = co_await run_resign(o, lk);
            break;
        case subcommand::none:
            break;
        }
    } catch (...) {
        failure = std::current_exception();
    }
    // Sends what is still queued (the release of a guard let go) before the socket closes.
    conn.close();
    if (failure)
        std::rethrow_exception(failure);
    co_return code;
}

void usage_failure(subcommand cmd, std::string_view message) {
    complain(message);
    std::fprintf(stderr, "%s\ntry 'colock --help' for more information\n", usage_line(cmd).c_str());
}

// The library's messages may already start with "colock: ".
std::string without_tool_prefix(std::string text) {
    constexpr std::string_view prefix = "colock: ";
    if (text.starts_with(prefix))
        text.erase(0, prefix.size());
    return text;
}

} // namespace

void complain(std::string_view message) {
    std::fflush(stdout); // keep the order of what both streams show
    std::fprintf(stderr, "colock: %.*s\n", static_cast<int>(message.size()), message.data());
}

} // namespace colock::cli

int main(int argc, char** argv) {
    namespace asio = boost::asio;
    using namespace colock::cli;
    note_inherited_fds();

    options o;
    try {
        o = parse_args(argc, argv, std::getenv("COLOCK_REDIS_URL"));
    } catch (usage_error const& e) {
        usage_failure(e.cmd(), e.what());
        return exit_usage;
    }
    if (o.help) {
        std::fputs(help_text().c_str(), stdout);
        return exit_ok;
    }
    if (o.version) {
        std::printf("colock %s\n", COLOCK_VERSION_STRING);
        return exit_ok;
    }

    boost::system::error_code url_error;
    std::string reason;
    auto cfg = colock::redis::config::from_url(o.url, url_error, &reason);
    if (url_error) {
        usage_failure(o.cmd, fmt::format("{}: {}", o.url_source, printable(reason)));
        return exit_usage;
    }
    cfg.client_name = "colock-cli";
    cfg.connect_timeout = connect_timeout;
    if (o.verbose) {
        cfg.log = [](colock::log_level level, std::string_view line) {
            complain(fmt::format("{}: {}", colock::to_string(level), line));
        };
        cfg.min_log_level = colock::log_level::info;
    }

    try {
        asio::io_context io;
        std::exception_ptr failure;
        int code = exit_failure;
        asio::co_spawn(io, run(std::move(o), std::move(cfg)), [&](std::exception_ptr e, int c) {
            failure = e;
            code = c;
        });
        io.run();
        if (failure)
            std::rethrow_exception(failure);
        return code;
    } catch (std::exception const& e) {
        complain(printable(without_tool_prefix(e.what())));
        return exit_failure;
    }
}
