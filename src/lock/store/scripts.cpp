// A script with its SHA-1, the Cluster variant of a text, and the set of each variant.
#include "lock/store/scripts.hpp"

#include "lock/store/election_scripts.hpp"
#include "lock/store/lock_scripts.hpp"
#include "lock/store/semaphore_scripts.hpp"

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
    return script{std::move(text), std::move(sha)};
}

namespace {

script_set make_set(script_variant variant) {
    bool const sharded = variant == script_variant::sharded;
    return script_set{variant,
                      make_script(acquire_source, sharded),
                      make_script(release_source, sharded),
                      make_script(extend_source, sharded),
                      make_script(status_source, sharded),
                      make_script(force_unlock_source, sharded),
                      make_script(semaphore_acquire_source, sharded),
                      make_script(semaphore_release_source, sharded),
                      make_script(semaphore_downgrade_source, sharded),
                      make_script(semaphore_extend_source, sharded),
                      make_script(semaphore_read_source, sharded),
                      make_script(proclaim_source, sharded),
                      make_script(election_read_source, sharded)};
}

} // namespace

script_set const& scripts_for(script_variant variant) {
    static script_set const sets[2] = {make_set(script_variant::plain),
                                       make_set(script_variant::sharded)};
    return sets[variant == script_variant::sharded ? 1 : 0];
}

} // namespace colock::detail
