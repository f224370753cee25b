// A locker's holder record as written and as read back (core/holder_record): the fields a
// locker writes about its process, and how status reads a record, foreign and malformed
// fields included (a record is a hash anyone with access may have written).
#include "lock/core/holder_record.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

using namespace std::chrono_literals;
using colock::detail::holder_record_fields;
using colock::detail::read_holder;
using fields = std::vector<std::pair<std::string, std::string>>;

namespace {

std::chrono::system_clock::time_point at_ms(std::int64_t ms) {
    return std::chrono::system_clock::time_point(std::chrono::milliseconds(ms));
}

} // namespace

TEST_CASE("holder record: a locker writes host, pid, program, client name and start, in that "
          "order") {
    auto const f = holder_record_fields("billing-7");
    REQUIRE(f.size() == 5);
    CHECK(f[0].first == "host");
    CHECK(f[1].first == "pid");
    CHECK(f[2].first == "program");
    CHECK(f[3].first == "client_name");
    CHECK(f[4].first == "started");
    CHECK(f[1].second == std::to_string(::getpid()));
    CHECK(f[3].second == "billing-7");
    CHECK_FALSE(f[0].second.empty());
    CHECK_FALSE(f[2].second.empty());
}

TEST_CASE("holder record: the host written is gethostname's") {
    char name[256] = {};
    REQUIRE(::gethostname(name, sizeof name - 1) == 0);
    CHECK(holder_record_fields("")[0].second == name);
}

TEST_CASE("holder record: the start is now in milliseconds since the epoch") {
    auto const before = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    auto const f = holder_record_fields("c");
    auto const after = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
    auto const started = std::stoll(f[4].second);
    CHECK(started >= before);
    CHECK(started <= after);
}

TEST_CASE("holder record: what a locker writes reads back as its process") {
    auto const h = read_holder(holder_record_fields("svc"));
    CHECK(h.pid == ::getpid());
    CHECK(h.client_name == "svc");
    CHECK(h.host == holder_record_fields("")[0].second);
    CHECK(h.program == holder_record_fields("")[2].second);
    auto const age = std::chrono::system_clock::now() - h.started;
    CHECK(age >= 0ms);
    CHECK(age < 60s);
}

TEST_CASE("holder record: fields in any order are read, the start to the millisecond") {
    auto const h = read_holder(fields{{"started", "1700000000123"},
                                      {"client_name", "c"},
                                      {"program", "prog"},
                                      {"pid", "4242"},
                                      {"host", "h1"}});
    CHECK(h.host == "h1");
    CHECK(h.pid == 4242);
    CHECK(h.program == "prog");
    CHECK(h.client_name == "c");
    CHECK(h.started == at_ms(1700000000123));
}

TEST_CASE("holder record: fields it does not know are left out, and a missing one stays empty") {
    auto const h =
        read_holder(fields{{"host", "h"}, {"colour", "blue"}, {"HOST", "x"}, {"pid ", "9"}});
    CHECK(h.host == "h");
    CHECK(h.pid == 0);
    CHECK(h.program.empty());
    CHECK(h.client_name.empty());
    CHECK(h.started == std::chrono::system_clock::time_point{});
}

TEST_CASE("holder record: an empty record reads as nobody in particular") {
    auto const h = read_holder({});
    CHECK(h.host.empty());
    CHECK(h.pid == 0);
    CHECK(h.started == std::chrono::system_clock::time_point{});
}

TEST_CASE("holder record: a pid or start that is not a whole decimal number reads as 0") {
    for (std::string bad :
         {"", "abc", "12x", " 12", "12 ", "1.5", "+7", "0x10", "99999999999999999999999"}) {
        CAPTURE(bad);
        auto const h = read_holder(fields{{"pid", bad}, {"started", bad}});
        CHECK(h.pid == 0);
        CHECK(h.started == std::chrono::system_clock::time_point{});
    }
}

TEST_CASE("holder record: a negative pid or start is read as written") {
    auto const h = read_holder(fields{{"pid", "-3"}, {"started", "-1000"}});
    CHECK(h.pid == -3);
    CHECK(h.started == at_ms(-1000));
}

TEST_CASE("holder record: a field given twice reads as its last value") {
    auto const h = read_holder(fields{{"pid", "1"}, {"host", "a"}, {"pid", "2"}, {"host", "b"}});
    CHECK(h.pid == 2);
    CHECK(h.host == "b");
}

TEST_CASE("holder record: texts are kept byte for byte, spaces and control bytes included") {
    std::string const odd = std::string("h o\r\n\0st", 8);
    auto const h = read_holder(fields{{"host", odd}, {"client_name", ""}, {"program", "\xff"}});
    CHECK(h.host == odd);
    CHECK(h.client_name.empty());
    CHECK(h.program == "\xff");
}
