#include "scripts.hpp"

#include "lock_scripts.hpp"

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

} // namespace

script const& acquire_script(bool sharded) {
    static script const classic = make_script(acquire_source, false);
    static script const shard = make_script(acquire_source, true);
    return sharded ? shard : classic;
}
script const& release_script(bool sharded) {
    static script const classic = make_script(release_source, false);
    static script const shard = make_script(release_source, true);
    return sharded ? shard : classic;
}
script const& extend_script() {
    static script const s = make_script(extend_source, false);
    return s;
}
script const& status_script() {
    static script const s = make_script(status_source, false);
    return s;
}
script const& force_unlock_script() {
    static script const s = make_script(force_unlock_source, false);
    return s;
}

} // namespace colock::detail
