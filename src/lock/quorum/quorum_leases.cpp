#include "lock/quorum/quorum_leases.hpp"

#include "lock/quorum/quorum.hpp"

namespace colock::detail::redlock {

quorum_leases::lease_track* quorum_leases::find(std::string const& key, std::string const& token) {
    auto const k = keys_.find(key);
    if (k == keys_.end())
        return nullptr;
    auto const l = k->second.leases.find(token);
    return l == k->second.leases.end() ? nullptr : &l->second;
}

void quorum_leases::record(std::string const& key, std::string const& token,
                           std::vector<std::optional<std::uint64_t>> counted) {
    counted.resize(primaries_);
    auto& lease = keys_[key].leases[token];
    lease.counted = std::move(counted);
    lease.lost = false;
}

void quorum_leases::count(std::string const& key, std::string const& token, std::size_t i,
                          std::uint64_t changes) {
    if (auto* lease = find(key, token); lease && i < primaries_)
        lease->counted[i] = changes;
}

bool quorum_leases::confirm(std::string const& key, std::string const& token, std::size_t i,
                            std::uint64_t changes) {
    auto* lease = find(key, token);
    if (!lease || i >= primaries_)
        return true;
    auto& counted = lease->counted[i];
    if (counted && *counted != changes)
        return false; // replaced since it granted: it no longer counts
    counted = changes;
    return true;
}

void quorum_leases::forget(std::string const& key, std::string const& token) {
    auto const k = keys_.find(key);
    if (k == keys_.end())
        return;
    k->second.leases.erase(token);
    if (k->second.leases.empty())
        keys_.erase(k);
}

bool quorum_leases::mark_replaced(
    std::function<std::uint64_t(std::size_t, std::string const&)> const& changes_now) {
    bool lost_any = false;
    for (auto& [key, track] : keys_)
        for (auto& [token, lease] : track.leases) {
            if (lease.lost)
                continue;
            std::size_t counting = 0;
            for (std::size_t i = 0; i < primaries_; ++i)
                if (lease.counted[i] && *lease.counted[i] == changes_now(i, key))
                    ++counting;
            if (counting >= quorum::majority(primaries_))
                continue;
            lease.lost = true;
            ++track.changes;
            lost_any = true;
        }
    return lost_any;
}

std::uint64_t quorum_leases::changes(std::string const& key) const noexcept {
    auto const k = keys_.find(key);
    return k == keys_.end() ? 0 : k->second.changes;
}

std::size_t quorum_leases::tracked(std::string const& key) const noexcept {
    auto const k = keys_.find(key);
    return k == keys_.end() ? 0 : k->second.leases.size();
}

} // namespace colock::detail::redlock
