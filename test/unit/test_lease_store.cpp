// The key layout of the lease store's seam (store/lease_store.hpp): a lock's keys and wake
// channel under a prefix, a key space's record, the lock key read back from a wake channel
// (hostile channels and owners included), and the hand-off claim.
#include "lock/store/lease_store.hpp"

#include "redis/cluster_slots.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace std::chrono_literals;
using colock::detail::handoff_claim;
using colock::detail::key_space;
using colock::detail::lock_keys;
using colock::detail::max_handoff_claim;
using colock::redis::detail::hash_slot;

TEST_CASE("lock keys: the lock, its queue, its deadlines and the wake channels under the name's "
          "hash tag") {
    lock_keys const k("app:", "orders", "L1");
    CHECK(k.key == "app:{orders}");
    CHECK(k.queue_key == "app:{orders}:q");
    CHECK(k.deadlines_key == "app:{orders}:qd");
    CHECK(k.channel_prefix == "app:{orders}:w:");
    CHECK(k.owner == "L1");
    CHECK(k.channel == "app:{orders}:w:L1");
    CHECK(k.record_key.empty()); // a lock has no record
}

TEST_CASE("lock keys: an empty prefix puts the hash tag first") {
    lock_keys const k("", "n", "o");
    CHECK(k.key == "{n}");
    CHECK(k.channel == "{n}:w:o");
}

TEST_CASE("lock keys: made from the lock key itself, the same keys as from prefix and name") {
    lock_keys const from_name("p:", "n", "o");
    lock_keys const from_key(std::string("p:{n}"), "o");
    CHECK(from_key.key == from_name.key);
    CHECK(from_key.queue_key == from_name.queue_key);
    CHECK(from_key.deadlines_key == from_name.deadlines_key);
    CHECK(from_key.channel_prefix == from_name.channel_prefix);
    CHECK(from_key.channel == from_name.channel);
}

TEST_CASE("lock keys: a key space with a record gives each lease `<lock key>:e`; one without "
          "gives none") {
    key_space const election{"p:election:", true, "election"};
    lock_keys const with(election, "leader", "o");
    CHECK(with.key == "p:election:{leader}");
    CHECK(with.record_key == "p:election:{leader}:e");
    CHECK(with.queue_key == "p:election:{leader}:q");

    key_space const plain{"p:", false};
    lock_keys const without(plain, "leader", "o");
    CHECK(without.key == "p:{leader}");
    CHECK(without.record_key.empty());
}

TEST_CASE("key space: a lock's by default, without a record") {
    key_space const s{"p:"};
    CHECK_FALSE(s.with_record);
    CHECK(s.kind == "lock");
}

TEST_CASE("lock keys: every key and channel of a name lies in one cluster slot, for names with "
          "braces, spaces and bytes of any kind inside") {
    std::vector<std::string> const names{"n",
                                         "orders",
                                         "a b",
                                         "a{b}c",
                                         "{x}",
                                         "x}",
                                         "a:w:o",
                                         "\xff\x01",
                                         std::string(1024, 'z'),
                                         std::string("nul\0in", 6)};
    for (auto const& name : names) {
        CAPTURE(name);
        key_space const space{"app:", true};
        lock_keys const k(space, name, "locker-1");
        auto const slot = hash_slot(k.key);
        for (auto const& other :
             {k.queue_key, k.deadlines_key, k.channel, k.record_key, k.channel_prefix + "x"})
            CHECK_MESSAGE(hash_slot(other) == slot, other);
        // And it is the slot of the tag: the name up to its first '}'.
        CHECK(slot == hash_slot(fmt::format("{{{}}}", name)));
    }
}

TEST_CASE("lock keys: two names differ in their keys, however alike") {
    CHECK(lock_keys("p:", "a", "o").key != lock_keys("p:", "a ", "o").key);
    CHECK(lock_keys("p:", "a", "o").key != lock_keys("p:", "A", "o").key);
    CHECK(lock_keys("p:", "a", "o").channel != lock_keys("p:", "a", "o2").channel);
}

TEST_CASE("key_of_channel: a locker's wake channel gives back the lock key") {
    lock_keys const k("p:", "n", "me");
    CHECK(lock_keys::key_of_channel(k.channel, "me") == k.key);
    CHECK(lock_keys::key_of_channel("x:w:me", "me") == std::string("x"));
}

TEST_CASE("key_of_channel: the round trip holds for names that contain the suffix themselves") {
    for (std::string name : {":w:me", "a:w:me", "w:me", ":w:", "me", "{}:w:me:w:me"}) {
        CAPTURE(name);
        lock_keys const k("p:", name, "me");
        CHECK(lock_keys::key_of_channel(k.channel, "me") == k.key);
    }
}

TEST_CASE("key_of_channel: another locker's channel, or a channel that only ends like one, is "
          "none of ours") {
    lock_keys const theirs("p:", "n", "them");
    CHECK_FALSE(lock_keys::key_of_channel(theirs.channel, "me"));
    CHECK_FALSE(lock_keys::key_of_channel("p:{n}:w:xme", "me")); // owner "xme"
    CHECK_FALSE(lock_keys::key_of_channel("p:{n}:w:me ", "me"));
    CHECK_FALSE(lock_keys::key_of_channel("p:{n}:W:me", "me"));
    CHECK_FALSE(lock_keys::key_of_channel("p:{n}:me", "me"));
    // A locker's id that is the tail of another's is not mistaken for it.
    CHECK_FALSE(lock_keys::key_of_channel("p:{n}:w:me", "e"));
}

TEST_CASE("key_of_channel: the suffix alone, or less, names no lock key") {
    CHECK_FALSE(lock_keys::key_of_channel(":w:me", "me"));
    CHECK_FALSE(lock_keys::key_of_channel("w:me", "me"));
    CHECK_FALSE(lock_keys::key_of_channel("", "me"));
    CHECK_FALSE(lock_keys::key_of_channel("", ""));
    CHECK_FALSE(lock_keys::key_of_channel(":w:", ""));
}

TEST_CASE("key_of_channel: owners with separators or braces in them") {
    CHECK(lock_keys::key_of_channel("p:{n}:w:a:w:b", "a:w:b") == std::string("p:{n}"));
    CHECK(lock_keys::key_of_channel("p:{n}:w:a:w:b", "b") == std::string("p:{n}:w:a"));
    CHECK(lock_keys::key_of_channel("p:{n}:w:{}", "{}") == std::string("p:{n}"));
    CHECK(lock_keys::key_of_channel("p:{n}:w:", "") == std::string("p:{n}"));
}

TEST_CASE("handoff_claim: the lock's ttl, at most max_handoff_claim") {
    CHECK(handoff_claim(200ms) == 200ms);
    CHECK(handoff_claim(max_handoff_claim) == max_handoff_claim);
    CHECK(handoff_claim(max_handoff_claim + 1ms) == max_handoff_claim);
    CHECK(handoff_claim(std::chrono::milliseconds::max()) == max_handoff_claim);
}

TEST_CASE("lease store: a queue entry outlives the refresh interval that keeps it") {
    CHECK(colock::detail::queue_refresh_interval < colock::detail::queue_entry_ttl);
    CHECK(max_handoff_claim <= colock::detail::queue_entry_ttl);
}
