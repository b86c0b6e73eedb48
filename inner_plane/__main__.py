from inner_plane.cli import main

main()
