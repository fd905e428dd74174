# Shared by the hack/ scripts. Source it.
# registry_reachable: whether Docker Hub answers from here (users' laptops: yes; these CI machines: no registry).
registry_reachable() {
  case "${TIERPOOL_OFFLINE:-auto}" in
    1|true|yes) return 1 ;;
    0|false|no) return 0 ;;
  esac
  getent hosts registry-1.docker.io >/dev/null 2>&1
}
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
