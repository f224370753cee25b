// A script with its SHA-1, the Cluster variant of a text, and the set of each variant with its
// Functions library.
#include "lock/store/scripts.hpp"

#include "lock/store/election_scripts.hpp"
#include "lock/store/fence_scripts.hpp"
#include "lock/store/lock_scripts.hpp"
#include "lock/store/multi_scripts.hpp"
#include "lock/store/semaphore_scripts.hpp"

#include <colock/functions_library.hpp>

#include <fmt/format.h>
#include <openssl/evp.h>

#include <stdexcept>

namespace colock::detail {

namespace {

std::string sha1_hex(std::string_view text) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha1(), nullptr) != 1)
        throw std::runtime_error("colock: SHA-1 of a lock script failed");
    std::string out;
    for (unsigned i = 0; i < length; ++i)
        out += fmt::format("{:02x}", digest[i]);
    return out;
}

} // namespace

script make_script(std::string_view source, bool sharded) {
    // Sharded: every 'PUBLISH' becomes 'SPUBLISH'. Built by appending (an insert() in place
    // draws a false -Wstringop-overflow from GCC 12 in a Release build).
    std::string text;
    text.reserve(source.size() + 16);
    std::size_t copied = 0;
    if (sharded)
        for (auto at = source.find("'PUBLISH'"); at != std::string_view::npos;
             at = source.find("'PUBLISH'", at + 1)) {
            text.append(source.substr(copied, at + 1 - copied));
            text += 'S';
            copied = at + 1;
        }
    text.append(source.substr(copied));
    auto sha = sha1_hex(text);
    return script{std::move(text), std::move(sha), {}};
}

namespace {

// What a function may do on a full server or a replica (the Redis docs' script flags).
enum class runs_when {
    memory_allows, // no flags: refused on a full server, as a script's first write is
    memory_full,   // allow-oom: it frees or renews what is held
    read_only,     // no-writes (which allows a full server too)
};

std::string_view flags_of(runs_when r) {
    switch (r) {
    case runs_when::memory_full:
        return "{'allow-oom'}";
    case runs_when::read_only:
        return "{'no-writes'}";
    case runs_when::memory_allows:
        break;
    }
    return "{}";
}

// Each script of the set: where it goes, its text, its function's name in the library (after
// the library's own) and its flags.
struct script_spec {
    script script_set::*member;
    std::string_view source;
    std::string_view short_name;
    runs_when flags;
};

constexpr script_spec specs[] = {
    {&script_set::acquire, acquire_source, "acquire", runs_when::memory_allows},
    {&script_set::release, release_source, "release", runs_when::memory_full},
    {&script_set::extend, extend_source, "extend", runs_when::memory_full},
    {&script_set::status, status_source, "status", runs_when::read_only},
    {&script_set::force_unlock, force_unlock_source, "force_unlock", runs_when::memory_full},
    {&script_set::acquire_known, acquire_known_source, "acquire_known", runs_when::memory_allows},
    {&script_set::release_known, release_known_source, "release_known", runs_when::memory_full},
    {&script_set::extend_known, extend_known_source, "extend_known", runs_when::memory_full},
    {&script_set::semaphore_acquire, semaphore_acquire_source, "semaphore_acquire",
     runs_when::memory_allows},
    {&script_set::semaphore_release, semaphore_release_source, "semaphore_release",
     runs_when::memory_full},
    {&script_set::semaphore_downgrade, semaphore_downgrade_source, "semaphore_downgrade",
     runs_when::memory_full},
    {&script_set::semaphore_extend, semaphore_extend_source, "semaphore_extend",
     runs_when::memory_full},
    // The semaphore's read drops lapsed permits on the way: it writes.
    {&script_set::semaphore_read, semaphore_read_source, "semaphore_read", runs_when::memory_full},
    {&script_set::proclaim, proclaim_source, "proclaim", runs_when::memory_allows},
    {&script_set::election_read, election_read_source, "election_read", runs_when::read_only},
    {&script_set::fenced_write, fenced_write_source, "fenced_write", runs_when::memory_allows},
    {&script_set::acquire_all, acquire_all_source, "acquire_all", runs_when::memory_allows},
    {&script_set::release_all, release_all_source, "release_all", runs_when::memory_full},
    {&script_set::extend_all, extend_all_source, "extend_all", runs_when::memory_full},
};

script_set make_set(script_variant variant) {
    bool const sharded = variant == script_variant::sharded;
    script_set set{variant, {}, {}, {}, {}, {}, {}, {}, {}, {}, {},
                   {},      {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
    std::string hashed;
    for (auto const& spec : specs) {
        set.*spec.member = make_script(spec.source, sharded);
        hashed += spec.short_name;
        hashed += flags_of(spec.flags);
        hashed += (set.*spec.member).source;
    }
    // The library: each script's text is the body of a function of (KEYS, ARGV), so that it runs
    // unchanged, as EVALSHA runs it.
    set.library_name = "colock_" + sha1_hex(hashed).substr(0, 16);
    set.library = fmt::format("#!lua name={}\n", set.library_name);
    for (auto const& spec : specs) {
        auto& member = set.*spec.member;
        member.function = fmt::format("{}_{}", set.library_name, spec.short_name);
        set.library += fmt::format("redis.register_function{{function_name='{}', flags={}, "
                                   "callback=function(KEYS, ARGV)\n{}\nend}}\n",
                                   member.function, flags_of(spec.flags), member.source);
    }
    return set;
}

} // namespace

script_set const& scripts_for(script_variant variant) {
    static script_set const sets[2] = {make_set(script_variant::plain),
                                       make_set(script_variant::sharded)};
    return sets[variant == script_variant::sharded ? 1 : 0];
}

} // namespace colock::detail

namespace colock {

functions_library functions_library_for(redis::config const& cfg) {
    auto const& set = detail::scripts_for(cfg.uses_cluster() ? detail::script_variant::sharded
                                                             : detail::script_variant::plain);
    return functions_library{set.library_name, set.library};
}

} // namespace colock
