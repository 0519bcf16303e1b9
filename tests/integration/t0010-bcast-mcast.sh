#!/usr/bin/env bash
# t0010: t0006's broadcasts and bad inputs again, with the agents carrying
# the data by multicast (SwitchParameters storm_mcast): the same copies,
# owners, errors and clean-ups, plus the checks that the chunks did travel
# by multicast and that a node whose network drops it is served by the tree.
T_BCAST_MCAST=1 T_NAME=t0010-bcast-mcast exec bash "$(dirname "$0")/t0006-bcast.sh"
