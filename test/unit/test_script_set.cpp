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
            &s.semaphore_acquire,
            &s.semaphore_release,
            &s.semaphore_downgrade,
            &s.semaphore_extend,
            &s.semaphore_read,
            &s.proclaim,
            &s.election_read};
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
