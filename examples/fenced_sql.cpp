// A job finished under a lock, with the lock's fence checked where the writes land: the job's row
// in PostgreSQL (a `fence` column in the statement's WHERE clause) and its status in Redis
// (colock::fenced_resource). A holder paused past its lease (a GC pause, SIGSTOP, a swapped-out
// VM) that writes when it resumes is refused at both, once the next holder has written: the
// picture of Kleppmann's critique of Redis locks, and its answer (docs/safety.md, "Checking the
// fence at the resource").
//
// Usage: colock_example_fenced_sql [--pause] JOB VALUE
// Redis from COLOCK_REDIS_URL (else redis://127.0.0.1:6379), PostgreSQL from COLOCK_PG_URL (a
// libpq connection string or URL). Takes lock "job:JOB" with a 1 s lease, checks that it still
// holds it, then writes VALUE to the job's row and status. With --pause, between the check and
// the writes it prints "paused" and waits for a line on stdin: the moment where a process can be
// stopped. Exit 0 when both writes were applied, 3 when both were refused (a later holder wrote),
// 1 on any other outcome.
#include <colock/colock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <libpq-fe.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

using pg_result = std::unique_ptr<PGresult, decltype(&PQclear)>;

// One PostgreSQL connection used from the io_context without blocking it: a statement is sent
// with PQsendQueryParams and its result read as the socket becomes readable.
class pg_connection {
public:
    pg_connection(asio::any_io_executor ex, std::string const& conninfo)
        : conn_(PQconnectdb(conninfo.c_str()), &PQfinish), socket_(ex) {
        // Connecting blocks, once, before the io_context runs anything else of ours.
        if (PQstatus(conn_.get()) != CONNECTION_OK)
            throw std::runtime_error(fmt::format("PostgreSQL: {}", PQerrorMessage(conn_.get())));
        if (PQsetnonblocking(conn_.get(), 1) != 0)
            throw std::runtime_error("PostgreSQL: cannot make the connection non-blocking");
        socket_.assign(dup(PQsocket(conn_.get())));
    }

    // Runs `sql` with `params` ($1, $2, ...) and returns its result; throws with the server's
    // message when it failed.
    asio::awaitable<pg_result> exec(char const* sql, std::vector<std::string> params = {}) {
        std::vector<char const*> values;
        for (auto const& p : params)
            values.push_back(p.c_str());
        if (PQsendQueryParams(conn_.get(), sql, static_cast<int>(values.size()), nullptr,
                              values.data(), nullptr, nullptr, 0) == 0)
            throw std::runtime_error(fmt::format("PostgreSQL: {}", PQerrorMessage(conn_.get())));
        for (int left = PQflush(conn_.get()); left != 0; left = PQflush(conn_.get())) {
            if (left < 0)
                throw std::runtime_error(
                    fmt::format("PostgreSQL: {}", PQerrorMessage(conn_.get())));
            co_await socket_.async_wait(asio::posix::stream_descriptor::wait_write,
                                        asio::use_awaitable);
        }
        pg_result last{nullptr, &PQclear};
        for (;;) {
            while (PQisBusy(conn_.get()) != 0) {
                co_await socket_.async_wait(asio::posix::stream_descriptor::wait_read,
                                            asio::use_awaitable);
                if (PQconsumeInput(conn_.get()) == 0)
                    throw std::runtime_error(
                        fmt::format("PostgreSQL: {}", PQerrorMessage(conn_.get())));
            }
            PGresult* r = PQgetResult(conn_.get());
            if (r == nullptr)
                break;
            last.reset(r);
        }
        auto const status = last ? PQresultStatus(last.get()) : PGRES_FATAL_ERROR;
        if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
            throw std::runtime_error(fmt::format(
                "PostgreSQL: {}", last ? PQresultErrorMessage(last.get()) : "no result"));
        co_return last;
    }

private:
    std::unique_ptr<PGconn, decltype(&PQfinish)> conn_;
    asio::posix::stream_descriptor socket_; // a duplicate of libpq's, which libpq closes
};

// The row keeps the fence of its last write; the statement checks it and writes in one step,
// under the row's lock. 1 row: applied; 0 rows: a later holder wrote first.
constexpr char const* fenced_upsert =
    "INSERT INTO jobs (id, state, fence) VALUES ($1, $2, $3) "
    "ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, fence = EXCLUDED.fence "
    "WHERE jobs.fence <= EXCLUDED.fence";

asio::awaitable<void> wait_for_line() {
    asio::posix::stream_descriptor in{co_await asio::this_coro::executor, dup(STDIN_FILENO)};
    asio::streambuf line;
    co_await asio::async_read_until(in, line, '\n', asio::use_awaitable);
}

asio::awaitable<int> run(colock::redis::config cfg, std::string pg_url, std::string job,
                         std::string value, bool pause) {
    auto const ex = co_await asio::this_coro::executor;
    pg_connection pg{ex, pg_url};
    co_await pg.exec("CREATE TABLE IF NOT EXISTS jobs (id text PRIMARY KEY, state text NOT NULL, "
                     "fence bigint NOT NULL)");
    colock::redis::connection conn{ex, cfg};
    colock::locker locker{conn};

    colock::lock_options opt;
    opt.ttl = 1s;
    auto guard = co_await locker.co_lock("job:" + job, opt);
    fmt::print("acquired fence {}\n", guard.fence());
    if (!guard.owns()) { // what a careful holder checks before it writes ...
        co_await guard.release();
        co_return 1;
    }
    if (pause) { // ... and where a pause still falls between that check and the write.
        fmt::print("paused\n");
        co_await wait_for_line();
    }

    // Written with the guard's fence, whatever has happened since the check.
    // Built apart, not as a braced list in the co_await: GCC 12 miscompiles that in a coroutine.
    std::vector<std::string> params;
    params.push_back(job);
    params.push_back(value);
    params.push_back(std::to_string(guard.fence()));
    auto const row = co_await pg.exec(fenced_upsert, std::move(params));
    bool const row_written = std::string_view(PQcmdTuples(row.get())) == "1";
    fmt::print("row: {}\n", row_written ? "written" : "refused (a later holder wrote first)");

    colock::fenced_resource status{conn, "job:{" + job + "}:fence"};
    bool status_written = false;
    try {
        co_await status.co_write("job:" + job, guard.fence(),
                                 colock::fenced_writes{}.hset("job:{" + job + "}", "state", value));
        status_written = true;
        fmt::print("status: written\n");
    } catch (boost::system::system_error const& e) {
        if (e.code() != colock::error::stale_fence)
            throw;
        fmt::print("status: refused ({})\n", e.what());
    }

    try {
        co_await guard.release();
    } catch (boost::system::system_error const& e) {
        fmt::print("unlock: {}\n", e.what()); // a lost lease's release may fail: it ran out
    }
    conn.close();
    if (row_written && status_written)
        co_return 0;
    co_return !row_written && !status_written ? 3 : 1;
}

} // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0); // each line out at once, for whoever watches
    std::vector<std::string_view> args(argv + 1, argv + argc);
    bool pause = false;
    if (!args.empty() && args.front() == "--pause") {
        pause = true;
        args.erase(args.begin());
    }
    if (args.size() != 2 || args[0].empty()) {
        fmt::print(stderr, "usage: {} [--pause] JOB VALUE\n", argv[0]);
        return 2;
    }
    std::string url = "redis://127.0.0.1:6379";
    if (char const* from_env = std::getenv("COLOCK_REDIS_URL"); from_env && *from_env)
        url = from_env;
    char const* pg_url = std::getenv("COLOCK_PG_URL");
    if (pg_url == nullptr || *pg_url == '\0') {
        fmt::print(stderr, "fenced_sql: COLOCK_PG_URL is not set (a PostgreSQL URL)\n");
        return 2;
    }

    try {
        auto const cfg = colock::redis::config::from_url(url);
        asio::io_context io;
        int status = 1;
        asio::co_spawn(io, run(cfg, pg_url, std::string(args[0]), std::string(args[1]), pause),
                       [&](std::exception_ptr failure, int result) {
                           if (failure)
                               std::rethrow_exception(failure);
                           status = result;
                       });
        io.run();
        return status;
    } catch (std::exception const& e) {
        fmt::print(stderr, "fenced_sql: {}\n", e.what());
        return 1;
    }
}
