# Sourced by the CI scripts: python_of VERSION prints the newest patch release of
# that Python which pyenv has (3.9 -> .../versions/3.9.18/bin/python), or fails with a
# line saying how to add it: never a silent skip.
python_of() {
  local root="${PYENV_ROOT:-$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")}" py="" dir
  for dir in $(ls -d "$root/versions/$1".* 2>/dev/null | sort -V); do
    if [ -x "$dir/bin/python" ]; then py="$dir/bin/python"; fi
  done
  if [ -z "$py" ]; then
    echo "ci: no Python $1 under $root/versions (pyenv has:" \
      "$(ls "$root/versions" 2>/dev/null | tr '\n' ' ')): the machine image should" \
      "bring it; \`pyenv install $1\` adds it" >&2
    return 1
  fi
  echo "$py"
}
