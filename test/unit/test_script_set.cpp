// The script-variant seam without a server: each variant's set holds every script of the
// family once, sent by its SHA-1, and only the sharded set publishes with SPUBLISH.
#include "lock/store/scripts.hpp"

#include "lock/store/election_scripts.hpp"
#include "lock/store/lock_scripts.hpp"
#include "lock/store/semaphore_scripts.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

using namespace colock::detail;

namespace {

std::vector<script const*> every(script_set const& s) {
    return {&s.acquire,
            &s.release,
            &s.extend,
            &s.status,
            &s.force_unlock,
            &s.acquire_known,
            &s.release_known,
            &s.extend_known,
            &s.semaphore_acquire,
            &s.semaphore_release,
            &s.semaphore_downgrade,
            &s.semaphore_extend,
            &s.semaphore_read,
            &s.proclaim,
            &s.election_read,
            &s.fenced_write,
            &s.acquire_all,
            &s.release_all,
            &s.extend_all};
}

bool publishes(std::string_view text, std::string_view command) {
    return text.find(command) != std::string_view::npos;
}

} // namespace

TEST_CASE("scripts_for: one set per variant, made once; every script distinct, its SHA-1 its "
          "text's (40 hex digits)") {
    auto const& plain = scripts_for(script_variant::plain);
    auto const& sharded = scripts_for(script_variant::sharded);
    CHECK(&plain == &scripts_for(script_variant::plain));
    CHECK(plain.variant == script_variant::plain);
    CHECK(sharded.variant == script_variant::sharded);
    for (auto const* set : {&plain, &sharded}) {
        std::set<std::string> shas;
        for (auto const* s : every(*set)) {
            CHECK(s->sha.size() == 40);
            CHECK(s->sha.find_first_not_of("0123456789abcdef") == std::string::npos);
            CHECK(s->sha == make_script(s->source).sha);
            shas.insert(s->sha);
        }
        CHECK(shas.size() == every(*set).size());
    }
    CHECK(plain.acquire.source == acquire_source);
    CHECK(plain.semaphore_read.source == semaphore_read_source);
    CHECK(plain.election_read.source == election_read_source);
}

TEST_CASE("scripts_for: the sharded set publishes only with SPUBLISH, the plain one only with "
          "PUBLISH; a script that publishes nothing is the same text in both") {
    auto const plain = every(scripts_for(script_variant::plain));
    auto const sharded = every(scripts_for(script_variant::sharded));
    int publishing = 0;
    for (std::size_t i = 0; i < plain.size(); ++i) {
        auto const& p = plain[i]->source;
        auto const& s = sharded[i]->source;
        CHECK_FALSE(publishes(p, "'SPUBLISH'"));
        CHECK_FALSE(publishes(s, "'PUBLISH'"));
        if (publishes(p, "'PUBLISH'")) {
            ++publishing;
            CHECK(publishes(s, "'SPUBLISH'"));
            CHECK(p != s);
        } else {
            CHECK(p == s);
        }
    }
    CHECK(publishing >= 6); // acquire, release, extend, force_unlock, the semaphore's, proclaim
    CHECK(scripts_for(script_variant::plain).publishes_beyond_slot());
    CHECK_FALSE(scripts_for(script_variant::sharded).publishes_beyond_slot());
}

namespace {

std::size_t count_of(std::string_view text, std::string_view what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1))
        ++n;
    return n;
}

// The flags the library gives `function`: the text between "flags=" and ", callback".
std::string_view flags_of(script_set const& set, std::string const& function) {
    auto const at = set.library.find("function_name='" + function + "'");
    REQUIRE(at != std::string::npos);
    auto const from = set.library.find("flags=", at) + 6;
    return std::string_view(set.library).substr(from, set.library.find(", callback", at) - from);
}

} // namespace

TEST_CASE("the Functions library: named after what it holds, one function per script with the "
          "script's text as its body, named after the library") {
    auto const& plain = scripts_for(script_variant::plain);
    auto const& sharded = scripts_for(script_variant::sharded);
    for (auto const* set : {&plain, &sharded}) {
        CHECK(set->library_name.starts_with("colock_"));
        CHECK(set->library_name.size() == 7 + 16);
        CHECK(set->library.starts_with("#!lua name=" + set->library_name + "\n"));
        CHECK(count_of(set->library, "redis.register_function{") == every(*set).size());
        std::set<std::string> names;
        for (auto const* s : every(*set)) {
            CHECK(s->function.starts_with(set->library_name + "_"));
            names.insert(s->function);
            // The body is the text EVALSHA runs, unchanged, as a function of (KEYS, ARGV).
            CHECK(count_of(set->library,
                           "callback=function(KEYS, ARGV)\n" + s->source + "\nend}") == 1);
        }
        CHECK(names.size() == every(*set).size());
    }
    // The variants' texts differ, and so do their names: both can be on one server.
    CHECK(plain.library_name != sharded.library_name);
    CHECK(plain.acquire.function != sharded.acquire.function);
}

TEST_CASE("the Functions library's flags: what frees or renews runs on a full server, what only "
          "reads is no-writes, what grants is refused there") {
    auto const& set = scripts_for(script_variant::plain);
    for (auto const* s :
         {&set.release, &set.extend, &set.extend_known, &set.force_unlock, &set.semaphore_release,
          &set.semaphore_downgrade, &set.semaphore_extend, &set.semaphore_read})
        CHECK_MESSAGE(flags_of(set, s->function) == "{'allow-oom'}", s->function);
    for (auto const* s : {&set.status, &set.election_read})
        CHECK_MESSAGE(flags_of(set, s->function) == "{'no-writes'}", s->function);
    for (auto const* s : {&set.acquire, &set.semaphore_acquire, &set.proclaim})
        CHECK_MESSAGE(flags_of(set, s->function) == "{}", s->function);
    // A read-only function must not write: its text calls no command that does.
    for (auto const* s : {&set.status, &set.election_read})
        for (std::string_view write : {"'SET'", "'DEL'", "'HSET'", "'HDEL'", "'PEXPIRE'", "'ZREM'",
                                       "'PUBLISH'", "'LPOP'", "'RPUSH'"})
            CHECK_MESSAGE(count_of(s->source, write) == 0, s->function, " calls ", write);
}
